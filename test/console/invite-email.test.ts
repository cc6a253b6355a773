/**
 * Invitations by email (console.smtp), against a real SMTP server on loopback (smtp-server): the
 * set-password link goes to the invitee's own mailbox and into no answer, so the inviter never holds
 * it; the link in the mail works (it sets the password, once); a Host the operator does not trust
 * cannot steer where the mailed link points; an SMTP server that refuses says so, and no link leaks.
 */
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { request, type RawResponse } from '../helpers/http';
import { startWorker, type WorkerProcess } from '../helpers/processes';

const TOKEN = 'admin-token-for-the-invite-email-test';
const PASSWORD = 'the inviting owner password';

interface Mail {
  from: string;
  to: string[];
  raw: string;
}
const mails: Mail[] = [];
/** Recipients the SMTP server refuses, as a server refuses a mailbox it does not know. */
const REFUSED = 'bounces@example.com';
const smtp = new SMTPServer({
  authOptional: true,
  disabledCommands: ['AUTH', 'STARTTLS'],
  logger: false,
  onRcptTo(address, _session, callback) {
    callback(address.address === REFUSED ? Object.assign(new Error('550 no such mailbox'), { responseCode: 550 }) : undefined);
  },
  onData(stream, session, callback) {
    let raw = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (raw += chunk));
    stream.on('end', () => {
      mails.push({ from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', to: session.envelope.rcptTo.map((rcpt) => rcpt.address), raw });
      callback();
    });
  },
});

let worker: WorkerProcess;
let gw: TestGateway;
let account: string;
let ownerCookie: string;

beforeAll(async () => {
  await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', resolve));
  const smtpPort = (smtp.server.address() as AddressInfo).port;
  worker = await startWorker();
  gw = await startTestGateway({
    providers: { mock: { workers: [worker.url] } },
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    console: { smtp: { host: '127.0.0.1', port: smtpPort, secure: false, from: 'chatgate <invites@chatgate.test>' } },
  });
  account = (await admin('POST', '/accounts', { name: 'mailed' })).json<{ id: string }>().id;
  expect((await admin('POST', `/accounts/${account}/members`, { email: 'owner@example.com', role: 'owner', password: PASSWORD })).status).toBe(201);
  const signedIn = await consoleCall(undefined, 'POST', '/session', { email: 'owner@example.com', password: PASSWORD });
  expect(signedIn.status).toBe(200);
  ownerCookie = String(signedIn.headers['set-cookie']).split(';')[0]!;
});
afterAll(async () => {
  await gw?.stop();
  await worker?.stop();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
});

function admin(method: string, apiPath: string, body?: unknown) {
  return request(gw.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
}
function consoleCall(cookie: string | undefined, method: string, apiPath: string, body?: unknown) {
  return request(gw.url, {
    ca: gw.ca,
    method,
    path: `/console/api${apiPath}`,
    headers: { origin: `https://${new URL(gw.url).host}`, 'content-type': 'application/json', ...(cookie ? { cookie } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** The mail's text, quoted-printable undone (long lines are folded, `=` written =3D). */
function textOf(mail: Mail): string {
  const body = mail.raw.slice(mail.raw.indexOf('\r\n\r\n') + 4);
  return /content-transfer-encoding: quoted-printable/i.test(mail.raw) ? body.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))) : body;
}
const linkIn = (mail: Mail) => /https:\/\/\S+\/console\/#set-password=[A-Za-z0-9_-]{43}/.exec(textOf(mail))?.[0];

test("an invitee's link arrives in their mailbox, not in the inviter's answer, and sets their password", async () => {
  const before = mails.length;
  const invited = await consoleCall(ownerCookie, 'POST', '/members', { email: 'Invitee@Example.com', role: 'member' });
  expect(invited.status).toBe(201);
  expect(invited.json()).toEqual({ email: 'invitee@example.com', role: 'member', addedAt: expect.any(String), addedBy: 'owner@example.com', invited: 'email' });

  // The server took exactly one mail, to the invitee, from the configured sender.
  expect(mails.length).toBe(before + 1);
  const mail = mails[mails.length - 1]!;
  expect({ from: mail.from, to: mail.to }).toEqual({ from: 'invites@chatgate.test', to: ['invitee@example.com'] });
  expect(mail.raw).toMatch(/^Subject: You are invited to mailed on chatgate\r?$/m);
  const link = linkIn(mail)!;
  // Absolute, on the console's own address (no console.publicUrl here: the request's trusted Host).
  expect(link.startsWith(`https://${new URL(gw.url).host}/console/#set-password=`)).toBe(true);
  const token = link.split('#set-password=')[1]!;
  expect(invited.body).not.toContain(token);

  const set = await consoleCall(undefined, 'POST', '/password', { token, password: 'the invitee chose this' });
  expect(set.json()).toEqual({ email: 'invitee@example.com' });
  expect((await consoleCall(undefined, 'POST', '/password', { token, password: 'and again, later on' })).status).toBe(400); // once
  expect((await consoleCall(undefined, 'POST', '/session', { email: 'invitee@example.com', password: 'the invitee chose this' })).status).toBe(200);

  // The audit trail says a link was mailed, and holds no token.
  const audit = (await consoleCall(ownerCookie, 'GET', '/audit')).json<{ data: { action: string; target: string; details: unknown }[] }>().data;
  expect(audit.filter((event) => event.target === 'invitee@example.com').map((event) => [event.action, event.details])).toEqual(
    expect.arrayContaining([
      ['invite.sent', {}],
      ['password.link_created', { delivery: 'email' }],
    ]),
  );
  expect(JSON.stringify(audit)).not.toContain(token);
});

test('adding someone who already exists sends nothing and answers no link', async () => {
  const before = mails.length;
  const added = await consoleCall(ownerCookie, 'POST', '/members', { email: 'invitee@example.com', role: 'owner' });
  expect(added.status).toBe(201);
  expect(added.json()).not.toHaveProperty('invited');
  expect(added.json()).not.toHaveProperty('passwordLink');
  expect(mails.length).toBe(before);
  expect((await consoleCall(ownerCookie, 'DELETE', '/members/invitee@example.com')).status).toBe(204);
});

test("a Host the operator does not trust cannot steer the mailed link to another site: 400, nobody added, nothing sent", async () => {
  const before = mails.length;
  const port = new URL(gw.url).port;
  // The inviter sends Host and Origin of a site they run (CSRF passes: they agree); the mail would point there.
  const answer = await new Promise<RawResponse>((resolve, reject) => {
    const req = https.request(
      { host: '127.0.0.1', port, method: 'POST', path: '/console/api/members', ca: gw.ca, servername: 'localhost', checkServerIdentity: () => undefined, agent: false, headers: { host: `evil.test:${port}`, origin: `https://evil.test:${port}`, cookie: ownerCookie, 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, json: () => JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify({ email: 'victim@example.com', role: 'member' }));
  });
  expect({ status: answer.status, code: answer.json().error.code }).toEqual({ status: 400, code: 'invite_host_not_allowed' });
  expect(mails.length).toBe(before);
  expect((await consoleCall(ownerCookie, 'GET', '/members')).json<{ data: { email: string }[] }>().data.map((m) => m.email)).not.toContain('victim@example.com');
});

test('an SMTP server that refuses the invitee: the member is added, the answer says invited: failed, and holds no link', async () => {
  const before = mails.length;
  const answer = await consoleCall(ownerCookie, 'POST', '/members', { email: REFUSED, role: 'member' });
  expect(answer.status).toBe(201);
  expect(answer.json()).toMatchObject({ email: REFUSED, invited: 'failed' });
  expect(answer.body).not.toMatch(/set-password/);
  expect(mails.length).toBe(before);
  const audit = (await consoleCall(ownerCookie, 'GET', '/audit')).json<{ data: { action: string; target: string; details: { reason?: string } }[] }>().data;
  expect(audit.find((event) => event.target === REFUSED && event.action === 'invite.failed')?.details.reason).toMatch(/550/);
  // The way out, documented in docs/operations.md: a platform admin makes a new link.
  const link = await admin('POST', `/accounts/${account}/members/${REFUSED}/password-link`);
  expect(link.json()).toMatchObject({ email: REFUSED, path: expect.stringMatching(/^\/console\/#set-password=/) });
});
