/**
 * The console behind a proxy at its own address (console.publicUrl): a change is taken only with that
 * origin, not with the gateway's own Host, which a request through the proxy does not show.
 */
import { gatewayWithWorker } from '../helpers/fixture';
import { request } from '../helpers/http';

const PUBLIC = 'https://console.example.com';
const f = gatewayWithWorker({ console: { publicUrl: `${PUBLIC}/console/` } });

const signIn = (origin: string) =>
  request(f.gw.url, {
    ca: f.gw.ca,
    method: 'POST',
    path: '/console/api/session',
    headers: { origin, 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'nobody@example.com', password: 'not the password at all' }),
  });

test('the public origin passes the CSRF check (and meets the password check)', async () => {
  const answer = await signIn(PUBLIC);
  expect(answer.status).toBe(401);
  expect(answer.json<{ error: { code: string } }>().error.code).toBe('invalid_credentials');
});

test("the gateway's own host as origin is refused 403 before the password is looked at", async () => {
  const answer = await signIn(`https://${new URL(f.gw.url).host}`);
  expect(answer.status).toBe(403);
  expect(answer.json<{ error: { code: string } }>().error.code).toBe('origin_not_allowed');
});
