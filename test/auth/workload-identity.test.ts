/**
 * Workload identity (auth.workloadIdentity): a JWT of a trusted issuer authenticates as an account,
 * no secret stored. A real gateway process against real JWT issuers on 127.0.0.1 (test/helpers/
 * jwt-issuer.ts: discovery document, JWKS, node:crypto signatures), trusted through NODE_EXTRA_CA_CERTS
 * as a cluster's CA would be. The hostile tokens: another audience, subject or issuer, a forged or
 * tampered signature, `none`, HS256 keyed with the public key, expired, not yet valid, no expiry, a
 * look-alike issuer, a flood of made-up key ids; and faults: an issuer that never answers, one that
 * goes away after its keys are known, and one that rotates its key.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadOrCreateDevCertificate } from '../../src/process/dev-certificate';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, openaiClient, request } from '../helpers/http';
import { publicPem, signingKey, signJwt, startJwtIssuer, type JwtIssuer } from '../helpers/jwt-issuer';
import { sample, scrape } from '../helpers/metrics';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const ADMIN_TOKEN = 'workload-identity-admin-token-0123456789';
const RUNNER = 'system:serviceaccount:ci:runner';
let dir: string;
let worker: WorkerProcess;
let issuer: JwtIssuer;
/** Never answers: its rule's tokens wait for the fetch's deadline. */
let silent: JwtIssuer;
/** Answers until its keys are known, then goes away. */
let vanishing: JwtIssuer;
/** Trusted by no rule, though it signs the same claims. */
let stranger: JwtIssuer;
/** Its discovery document names another issuer: every fetch of it fails. */
let impostor: JwtIssuer;
let gw: GatewayProcess;
let accountId: string;
let otherAccountId: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-workload-'));
  const tls = await loadOrCreateDevCertificate(path.join(dir, 'issuer-tls'));
  [worker, issuer, silent, vanishing, stranger, impostor] = await Promise.all([startWorker(), startJwtIssuer(tls), startJwtIssuer(tls), startJwtIssuer(tls), startJwtIssuer(tls), startJwtIssuer(tls)]);
  silent.hang = true;
  impostor.discoveryIssuer = 'https://accounts.example.com';
  const rule = { audience: 'chatgate', account: 'ci-team' };
  gw = await startGatewayProcess(
    dir,
    'gw',
    {
      admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN },
      providers: { mock: { workers: [worker.url] }, other: { workers: [worker.url] } },
      auth: {
        createFirstKey: false,
        lastUsedFlushMs: 200,
        workloadIdentity: [
          { ...rule, issuer: issuer.issuer, subject: 'system:serviceaccount:ci:*', models: ['mock/*'] },
          { ...rule, issuer: issuer.issuer, subject: 'repo:acme/limited:*', rateLimit: { requestsPerMinute: 2 } },
          { ...rule, issuer: issuer.issuer, subject: 'ghost:one:*', account: 'no-such-account' },
          // One subject, two audiences, two accounts: two identities, each billed to its own account.
          { ...rule, issuer: issuer.issuer, audience: 'chatgate-other', subject: 'system:serviceaccount:ci:*', account: 'other-team' },
          { ...rule, issuer: issuer.issuer, subject: 'repo:acme/app:*', claims: { repository_owner_id: '4242' } },
          { ...rule, issuer: impostor.issuer, subject: 'job:x:*' },
          { ...rule, issuer: silent.issuer, subject: 'job:x:*' },
          { ...rule, issuer: vanishing.issuer, subject: 'job:x:*' },
        ],
      },
    },
    { NODE_EXTRA_CA_CERTS: tls.certFile },
  );
  const created = await admin('POST', '/accounts', { name: 'ci-team' });
  expect(created.status).toBe(201);
  accountId = created.json<{ id: string }>().id;
  otherAccountId = (await admin('POST', '/accounts', { name: 'other-team' })).json<{ id: string }>().id;
}, 60_000);

afterAll(async () => {
  if (gw) await stopProcess(gw.child);
  await Promise.all([worker?.stop(), issuer?.close(), silent?.close(), vanishing?.close(), stranger?.close(), impostor?.close()]);
  rmSync(dir, { recursive: true, force: true });
});

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(gw.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const chat = (token: string, extra: Record<string, unknown> = {}) => request(gw.url, { ca: gw.ca, headers: bearer(token), body: chatBody(extra) });
const now = () => Math.floor(Date.now() / 1000);
const refusals = async () => sample(await scrape(gw.adminUrl), 'chatgate_auth_failures_total{reason="workload_identity"}');

test('a service-account token works with the openai client as its account, within its rule\'s models; its use is the account\'s, under its subject', async () => {
  const token = issuer.token({ sub: RUNNER, aud: ['chatgate', 'https://kubernetes.default.svc'] });
  const client = openaiClient(gw.url, token, gw.ca);
  const answer = await client.chat.completions.create({ model: 'mock/test-model', messages: [{ role: 'user', content: 'hello' }] });
  expect(answer.choices[0]?.message.content).toEqual(expect.any(String));
  const models = await client.models.list();
  expect(models.data.map((model) => model.id).every((id) => id.startsWith('mock/'))).toBe(true);

  const outside = await chat(token, { model: 'other/test-model' });
  expect(outside.status).toBe(403);

  const used = await eventually(async () => {
    const rows = (await admin('GET', `/accounts/${accountId}/usage`)).json<{ data: Array<{ keyId: string; requests: number; promptTokens: number }> }>().data;
    return rows.find((row) => /^workload:[0-9a-f]{8}:/.test(row.keyId) && row.keyId.endsWith(`:${RUNNER}`) && row.requests >= 1);
  });
  expect(used.promptTokens).toBeGreaterThan(0);

  // The same subject for the other audience is the other account's identity: its use is counted there, not here.
  const before = used.requests;
  expect((await chat(issuer.token({ sub: RUNNER, aud: 'chatgate-other' }))).status).toBe(200);
  const elsewhere = await eventually(async () => {
    const rows = (await admin('GET', `/accounts/${otherAccountId}/usage`)).json<{ data: Array<{ keyId: string; requests: number }> }>().data;
    return rows.find((row) => row.keyId.endsWith(`:${RUNNER}`) && row.requests === 1);
  });
  expect(elsewhere.keyId).not.toBe(used.keyId);
  const here = (await admin('GET', `/accounts/${accountId}/usage`)).json<{ data: Array<{ keyId: string; requests: number }> }>().data;
  expect(here.find((row) => row.keyId === used.keyId)?.requests).toBe(before);
}, 30_000);

test('tokens no rule accepts are 401 invalid_api_key, each counted, and none reaches a worker', async () => {
  const before = await refusals();
  const other = signingKey();
  const good = issuer.token({ sub: RUNNER, aud: 'chatgate' });
  const [head, , signature] = good.split('.');
  const hostile: Record<string, string> = {
    'another audience': issuer.token({ sub: RUNNER, aud: 'chatgate-staging' }),
    'no audience': issuer.token({ sub: RUNNER }),
    'a subject outside every glob': issuer.token({ sub: 'system:serviceaccount:prod:runner', aud: 'chatgate' }),
    'a look-alike subject': issuer.token({ sub: ' system:serviceaccount:ci:runner', aud: 'chatgate' }),
    'no subject': issuer.token({ aud: 'chatgate' }),
    'a subject too long': issuer.token({ sub: `system:serviceaccount:ci:${'x'.repeat(300)}`, aud: 'chatgate' }),
    'an issuer no rule trusts': stranger.token({ sub: RUNNER, aud: 'chatgate' }),
    'a look-alike issuer': signJwt({ iss: `${issuer.issuer}/`, sub: RUNNER, aud: 'chatgate', exp: now() + 600 }, issuer.keys[0]!),
    'claims of the trusted issuer signed by another key under its kid': signJwt({ iss: issuer.issuer, sub: RUNNER, aud: 'chatgate', exp: now() + 600 }, { ...other, kid: issuer.keys[0]!.kid }),
    'a wider payload under a real signature': `${head}.${Buffer.from(JSON.stringify({ iss: issuer.issuer, sub: 'system:serviceaccount:ci:admin', aud: 'chatgate', exp: now() + 600 })).toString('base64url')}.${signature}`,
    'alg none': signJwt({ iss: issuer.issuer, sub: RUNNER, aud: 'chatgate', exp: now() + 600 }, issuer.keys[0]!, { alg: 'none' }),
    'HS256 keyed with the public key': signJwt({ iss: issuer.issuer, sub: RUNNER, aud: 'chatgate', exp: now() + 600 }, issuer.keys[0]!, {}, publicPem(issuer.keys[0]!)),
    'expired a minute ago (past the 30 s leeway)': issuer.token({ sub: RUNNER, aud: 'chatgate', exp: now() - 60 }),
    'not valid for another minute': issuer.token({ sub: RUNNER, aud: 'chatgate', nbf: now() + 60 }),
    'no expiry': issuer.token({ sub: RUNNER, aud: 'chatgate', exp: undefined }),
    'a rule whose account does not exist': issuer.token({ sub: 'ghost:one:x', aud: 'chatgate' }),
    'a subject whose rule wants a claim it lacks': issuer.token({ sub: 'repo:acme/app:ref:refs/heads/main', aud: 'chatgate' }),
    'that claim with another value': issuer.token({ sub: 'repo:acme/app:ref:refs/heads/main', aud: 'chatgate', repository_owner_id: '4243' }),
    'that claim as a number': issuer.token({ sub: 'repo:acme/app:ref:refs/heads/main', aud: 'chatgate', repository_owner_id: 4242 }),
    'an expiry two years away': issuer.token({ sub: RUNNER, aud: 'chatgate', exp: now() + 2 * 366 * 86_400 }),
    'an expiry past what a date can hold': issuer.token({ sub: RUNNER, aud: 'chatgate', exp: 9e15 }),
  };
  const refusedIds: string[] = [];
  for (const [what, token] of Object.entries(hostile)) {
    const answer = await chat(token);
    expect({ what, status: answer.status, code: answer.json().error.code }).toEqual({ what, status: 401, code: 'invalid_api_key' });
    refusedIds.push(String(answer.headers['x-request-id']));
  }
  expect((await refusals()) - before).toBe(Object.keys(hostile).length);
  expect((await chat(issuer.token({ sub: 'repo:acme/app:ref:refs/heads/main', aud: 'chatgate', repository_owner_id: '4242' }))).status).toBe(200);
  // The genuine token still works after all of it; once the worker has told of its request, none of the refused ones is among what it received.
  const genuine = await chat(good);
  expect(genuine.status).toBe(200);
  await eventually(() => (worker.received.includes(String(genuine.headers['x-request-id'])) ? true : undefined));
  expect(worker.received.filter((id) => refusedIds.includes(id))).toEqual([]);
}, 30_000);

test("a rule's rate limit holds per subject, and the account's quota holds for its workloads", async () => {
  const limited = issuer.token({ sub: 'repo:acme/limited:ref:refs/heads/main', aud: 'chatgate' });
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await chat(limited)).status);
  expect(statuses).toEqual([200, 200, 429]);

  expect((await admin('PATCH', `/accounts/${accountId}`, { quota: { tokensPerDay: 1 } })).status).toBe(200);
  const runner = issuer.token({ sub: 'system:serviceaccount:ci:quota', aud: 'chatgate' });
  const refused = await eventually(async () => {
    const answer = await chat(runner);
    return answer.status === 429 ? answer : undefined;
  }, 10_000);
  expect(refused.json().error.code).toBe('insufficient_quota');
  expect((await admin('PATCH', `/accounts/${accountId}`, { quota: { tokensPerDay: null } })).status).toBe(200);
  await eventually(async () => ((await chat(runner)).status === 200 ? true : undefined), 10_000);
}, 30_000);

test('a workload identity cannot mint client tokens', async () => {
  const token = issuer.token({ sub: RUNNER, aud: 'chatgate' });
  const minted = await request(gw.url, { path: '/v1/client-tokens', ca: gw.ca, headers: { ...bearer(token), 'content-type': 'application/json' }, body: '{}' });
  expect(minted.status).toBe(403);
  expect(minted.json().error.code).toBe('permission_denied');
});

test('a rotated signing key is fetched at the first token that names it; the retired key stops; made-up key ids cost the issuer one fetch a second', async () => {
  const beforeRotation = issuer.token({ sub: 'system:serviceaccount:ci:before', aud: 'chatgate' });
  expect((await chat(beforeRotation)).status).toBe(200);
  const fetched = issuer.fetches.jwks;
  issuer.rotate();
  const afterRotation = issuer.token({ sub: 'system:serviceaccount:ci:after', aud: 'chatgate' });
  expect((await eventually(async () => ((await chat(afterRotation)).status === 200 ? true : undefined), 5_000))).toBe(true);
  expect(issuer.fetches.jwks).toBeGreaterThan(fetched);

  // A token of the retired key that this gateway never saw: its key is gone from the JWKS.
  const retired = signJwt({ iss: issuer.issuer, sub: 'system:serviceaccount:ci:late', aud: 'chatgate', exp: now() + 600 }, { ...signingKey(), kid: 'retired' });
  expect((await chat(retired)).status).toBe(401);

  const floodStarted = Date.now();
  const fetchesBefore = issuer.fetches.jwks;
  for (let i = 0; i < 10; i++) {
    const answers = await Promise.all(Array.from({ length: 10 }, (_, j) => chat(signJwt({ iss: issuer.issuer, sub: RUNNER, aud: 'chatgate', exp: now() + 600 }, { ...issuer.keys[0]!, kid: `made-up-${i}-${j}` }))));
    expect(answers.map((answer) => answer.status)).toEqual(Array(10).fill(401));
  }
  const seconds = (Date.now() - floodStarted) / 1000;
  expect(issuer.fetches.jwks - fetchesBefore).toBeLessThanOrEqual(Math.ceil(seconds) + 1);
}, 30_000);

test('an issuer that never answers costs a 503 after the deadline, not a hang; one that goes away keeps the keys it gave', async () => {
  const started = Date.now();
  const waiting = await chat(silent.token({ sub: 'job:x:build', aud: 'chatgate' }));
  expect(waiting.status).toBe(503);
  expect(waiting.json().error.code).toBe('identity_provider_unavailable');
  process.stderr.write(`a silent issuer's token answered 503 after ${Date.now() - started} ms\n`);

  expect((await chat(vanishing.token({ sub: 'job:x:one', aud: 'chatgate' }))).status).toBe(200);
  await vanishing.close();
  expect((await chat(vanishing.token({ sub: 'job:x:two', aud: 'chatgate' }))).status).toBe(200);
}, 30_000);

test('no token, nor any part of one, appears in the log', async () => {
  const token = issuer.token({ sub: 'system:serviceaccount:ci:logged', aud: 'wrong' });
  await chat(token);
  await chat(issuer.token({ sub: 'system:serviceaccount:ci:logged', aud: 'chatgate' }));
  const text = JSON.stringify(gw.log) + gw.stderr();
  for (const part of token.split('.')) expect(text).not.toContain(part);
});

test("an issuer whose discovery fails is asked again at most every 5 s, not once a forged token; a malformed key set never replaces good keys; a key too weak to use is 401, not 503", async () => {
  const fetched = impostor.fetches.discovery;
  const started = Date.now();
  for (let i = 0; i < 20; i++) expect((await chat(impostor.token({ sub: 'job:x:build', aud: 'chatgate' }))).status).toBe(503);
  expect(impostor.fetches.discovery - fetched).toBeLessThanOrEqual(1 + Math.floor((Date.now() - started) / 5000));
  expect(gw.log.filter((line) => String(line.msg).includes("issuer's keys could not be fetched") && line.issuer === impostor.issuer)).toHaveLength(1);

  // The issuer's keys are known; then it serves a malformed set: its tokens still verify, and a rotation served properly later is taken.
  expect((await chat(issuer.token({ sub: 'system:serviceaccount:ci:keep', aud: 'chatgate' }))).status).toBe(200);
  issuer.jwksBody = '{"keys":[1]}';
  const unknownKid = signJwt({ iss: issuer.issuer, sub: RUNNER, aud: 'chatgate', exp: now() + 600 }, { ...issuer.keys[0]!, kid: 'not-there' });
  const malformedServed = issuer.fetches.jwks;
  await eventually(async () => {
    expect((await chat(unknownKid)).status).toBe(401);
    return issuer.fetches.jwks > malformedServed ? true : undefined; // the unknown kid made it fetch the malformed set
  });
  expect((await chat(issuer.token({ sub: 'system:serviceaccount:ci:still', aud: 'chatgate' }))).status).toBe(200);
  issuer.jwksBody = undefined;

  // A 1024-bit RSA key published beside the real one: a token naming it, signed by it, is refused (jose will not use it), never a 5xx.
  const weak = signingKey('RS256', 'weak-key', 1024);
  issuer.publish(weak);
  const signedWeak = signJwt({ iss: issuer.issuer, sub: RUNNER, aud: 'chatgate', exp: now() + 600 }, weak);
  const weakServed = issuer.fetches.jwks;
  await eventually(async () => ((await chat(signedWeak)).status === 401 && issuer.fetches.jwks > weakServed ? true : undefined));
  // The gateway's set holds the weak key now: the token is checked against it, and refused.
  const answer = await chat(signedWeak);
  expect([answer.status, answer.json().error.code]).toEqual([401, 'invalid_api_key']);
}, 30_000);
