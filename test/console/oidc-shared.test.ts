/**
 * OIDC identities with two replicas on one PostgreSQL database: two subjects that say one person's
 * verified email reach the two replicas at the same moment; the store binds one of them, the other is
 * refused on both replicas, and the person's password and password sessions are gone everywhere. A
 * real OpenID Provider on loopback (test/helpers/oidc-provider.mjs) knows both replicas' callbacks.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { loadOrCreateDevCertificate } from '../../src/process/dev-certificate';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { request, type RawResponse } from '../helpers/http';
import { attemptSignIn, Browser, expectRefused, sessionCookieOf, startProvider, stopProvider, type ProviderProcess, oidcSettings } from '../helpers/oidc';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { stopProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

jest.setTimeout(90_000);

const CLIENT_ID = 'chatgate';
const SECRET = `gateway-secret-${randomBytes(16).toString('hex')}`;
const ADMIN_TOKEN = `admin-${randomBytes(16).toString('hex')}`;
const KIM_PASSWORD = `kim's password ${randomBytes(8).toString('hex')}`;

let dir: string;
let database: TestDatabase;
let provider: ProviderProcess;
let a: GatewayProcess;
let b: GatewayProcess;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-oidc-shared-'));
  database = await createTestDatabase();
  const tls = await loadOrCreateDevCertificate(path.join(dir, 'provider-tls'));
  provider = await startProvider(tls.certFile, tls.keyFile, tls.cert);
  const settings = {
    keyStore: { type: 'postgres', url: database.url },
    providers: { mock: { workers: ['http://127.0.0.1:9'] } },
    upstream: { health: { enabled: false } },
    console: {
      oidc: oidcSettings(provider.issuer, [{ value: 'platform-admins', admin: true }]),
    },
  };
  const env = { OIDC_SECRET: SECRET, NODE_EXTRA_CA_CERTS: tls.certFile, CHATGATE_ADMIN_TOKEN: ADMIN_TOKEN };
  [a, b] = (await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings, env)))) as [GatewayProcess, GatewayProcess];
  await provider.send({ cmd: 'configure', clients: [{ client_id: CLIENT_ID, client_secret: SECRET, redirect_uris: [a, b].map((gw) => `${gw.url}/console/api/oidc/callback`) }] });

  const team = await request(a.adminUrl, { method: 'POST', path: '/admin/api/accounts', headers: admin, body: JSON.stringify({ name: 'kims-team' }) });
  expect(team.status).toBe(201);
  const kim = await request(a.adminUrl, {
    method: 'POST',
    path: `/admin/api/accounts/${team.json<{ id: string }>().id}/members`,
    headers: admin,
    body: JSON.stringify({ email: 'kim@example.com', role: 'owner', password: KIM_PASSWORD }),
  });
  expect(kim.status).toBe(201);
});

afterAll(async () => {
  await Promise.all([a, b].filter(Boolean).map((gw) => stopProcess(gw.child)));
  await stopProvider(provider);
  await database?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };

test('two subjects with one verified email at two replicas at once: one is bound, the other refused on both; the password and its sessions are gone on both', async () => {
  const byPassword = await passwordSignIn(b, 'kim@example.com', KIM_PASSWORD);
  expect(byPassword.status).toBe(200);

  // Kim through replica a, the other subject through replica b: both through the provider first,
  // then both callbacks at the same moment.
  const ready = await Promise.all(
    [
      { login: 'kim@example.com', gw: a },
      { login: 'mallory-second', gw: b },
    ].map(async ({ login, gw }) => {
      const browser = new Browser({ provider, gw });
      const started = await browser.get(new URL(`${gw.url}/console/api/oidc/login`));
      expect(started.status).toBe(302);
      const callback = await browser.signInAtProvider(new URL(String(started.headers.location)), login);
      return { login, gw, browser, callback };
    }),
  );
  const answers = await Promise.all(ready.map(({ browser, callback }) => browser.get(callback)));
  expect(answers.map((answer) => answer.status).sort()).toEqual([302, 403]);
  const won = answers.findIndex((answer) => answer.status === 302);
  const winner = ready[won]!;
  const loser = ready[1 - won]!;
  expectRefused(answers[1 - won]!, { status: 403, code: 'oidc_identity_conflict' });
  expect(await winner.browser.session()).toMatchObject({ email: 'kim@example.com', via: 'oidc' });

  const bound = await query<{ issuer: string; subject: string; email: string }>('select issuer, subject, email from chatgate_identities');
  expect(bound).toEqual([expect.objectContaining({ issuer: provider.issuer, subject: winner.login, email: 'kim@example.com' })]);

  // The other subject is refused at either replica, now that the store knows the binding.
  for (const gw of [a, b]) expectRefused((await attemptSignIn({ provider, gw }, loser.login)).response, { status: 403, code: 'oidc_identity_conflict' });
  // The winner signs in at the other replica by the same binding.
  const again = await attemptSignIn({ provider, gw: winner.gw === a ? b : a }, winner.login);
  expect(again.response.status).toBe(302);
  expect(await again.browser.session()).toMatchObject({ email: 'kim@example.com' });

  // Kim's password session (made at b) is over at both replicas, and the password is gone.
  for (const gw of [a, b]) expect((await consoleCall(gw, byPassword, 'GET', '/session')).status).toBe(401);
  expect(await query('select password_hash from chatgate_people where email = $1', ['kim@example.com'])).toEqual([{ password_hash: null }]);
  for (const gw of [a, b]) expect((await passwordSignIn(gw, 'kim@example.com', KIM_PASSWORD)).status).toBe(401);
  const audited = await eventually(() => [...a.log, ...b.log].filter((line) => line.log === 'audit' && line.action === 'identity.bound'));
  expect(audited).toEqual([expect.objectContaining({ target: 'kim@example.com', details: expect.objectContaining({ subject: winner.login, passwordRemoved: true, sessionsEnded: 1 }) })]);
});

async function query<T = Record<string, unknown>>(sql: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    return (await client.query(sql, values)).rows as T[];
  } finally {
    await client.end();
  }
}

function consoleCall(gw: GatewayProcess, signedIn: RawResponse | undefined, method: string, urlPath: string, body?: unknown): Promise<RawResponse> {
  const cookie = signedIn && sessionCookieOf(signedIn)?.split(';')[0];
  return request(gw.url, {
    method,
    path: `/console/api${urlPath}`,
    ca: gw.ca,
    headers: { origin: gw.url, ...(cookie ? { cookie } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

function passwordSignIn(gw: GatewayProcess, email: string, password: string): Promise<RawResponse> {
  return consoleCall(gw, undefined, 'POST', '/session', { email, password });
}
