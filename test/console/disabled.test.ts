/** The console turned off in config: its paths say so, and the API beside it serves as before. */
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';

const f = gatewayWithWorker({ console: { enabled: false } });

test.each(['/console/', '/console/api/session', '/console/index.html'])('%s answers 404 console_disabled', async (path) => {
  const response = await request(f.gw.url, { ca: f.gw.ca, method: 'GET', path, body: undefined });
  expect(response.status).toBe(404);
  expect(response.json<{ error: { code: string } }>().error.code).toBe('console_disabled');
  expect(response.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
});

test('chat completions still serve', async () => {
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() })).status).toBe(200);
});
