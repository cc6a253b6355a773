/**
 * Leak reports that revoke, through a real gateway over TLS, with a P-256 key pair made here standing
 * in for GitHub's signing key (its public half in the config): a signed report revokes a live key at
 * once and is audited; the hostile ones (no signature, another key's, a body changed after signing,
 * an unknown key identifier, garbage) are refused 401 and change nothing; look-alikes are false
 * positives at no store lookup; a replayed report revokes nothing twice; the admin API takes other
 * scanners' lists and never repeats the strings.
 */
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { parseConfig } from '../../src/config';
import { sleep } from '../helpers/time';

const TOKEN = 'admin-token-for-leak-reports-0123456789';
const pair = () => generateKeyPairSync('ec', { namedCurve: 'P-256' });
const github = pair();
const stranger = pair();
const IDENTIFIER = 'bcb53661c06b4728e59d897fb6165d5c9cda0fd9cdf9d09ead458168deb7518c';
const f = gatewayWithWorker({
  admin: { host: '127.0.0.1', port: 0, token: TOKEN },
  secretScanning: { github: { publicKeys: [{ identifier: IDENTIFIER, key: github.publicKey.export({ type: 'spki', format: 'pem' }) as string }] } },
});

const signature = (body: string, key: KeyObject = github.privateKey) => sign('sha256', Buffer.from(body), key).toString('base64');
const report = (body: string, headers: Record<string, string>): Promise<RawResponse> =>
  request(f.gw.url, { ca: f.gw.ca, path: '/secret-scanning/github', headers: { 'content-type': 'application/json', ...headers }, body });
const signed = (body: string) => report(body, { 'github-public-key-identifier': IDENTIFIER, 'github-public-key-signature': signature(body) });
const matches = (...tokens: string[]) => JSON.stringify(tokens.map((token) => ({ token, type: 'chatgate_api_key', url: 'https://github.com/octo/repo/blob/abc/config.js', source: 'content' })));
const chat = (key: string) => request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() });
const admin = (method: string, path: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
type Audit = { data: Array<{ action: string; target: string; actor: string; details: Record<string, unknown> }> };

test('a signed report revokes the live key at once, audited with where it was found; the answer is GitHub’s format', async () => {
  const { key, id } = await f.gw.issueKey({ name: 'pushed to github' });
  expect((await chat(key)).status).toBe(200);
  const body = matches(key, 'cgk_not_a_key_at_all');
  const answer = await signed(body);
  expect(answer.status).toBe(200);
  expect(answer.json()).toEqual([
    { token_raw: key, token_type: 'chatgate_api_key', label: 'true_positive' },
    { token_raw: 'cgk_not_a_key_at_all', token_type: 'chatgate_api_key', label: 'false_positive' },
  ]);
  expect((await chat(key)).status).toBe(401); // at once: the revoking replica's cache hears its own change
  const accountId = (await admin('GET', '/keys')).json<{ data: Array<{ id: string; accountId: string; revokedAt: string | null }> }>().data.find((k) => k.id === id)!;
  expect(accountId.revokedAt).not.toBeNull();
  const audit = (await admin('GET', `/accounts/${accountId.accountId}/audit`)).json<Audit>().data.filter((e) => e.target === id && e.action === 'key.leaked');
  expect(audit).toEqual([expect.objectContaining({ actor: 'github-secret-scanning', details: { reporter: 'github', url: 'https://github.com/octo/repo/blob/abc/config.js', source: 'content' } })]);
  expect(JSON.stringify(audit)).not.toContain(key);

  // Sent again, twice at once (GitHub retries; an attacker replays): still a true positive, nothing revoked or audited twice.
  expect((await Promise.all([signed(body), signed(body)])).map((a) => a.status)).toEqual([200, 200]);
  expect((await signed(body)).json<Array<{ label: string }>>()[0]!.label).toBe('true_positive');
  expect((await admin('GET', `/accounts/${accountId.accountId}/audit`)).json<Audit>().data.filter((e) => e.target === id && e.action === 'key.leaked')).toHaveLength(1);
});

test('hostile reports: unsigned, signed by another key, changed after signing, unknown identifier, garbage signature: 401, the key keeps working', async () => {
  const { key } = await f.gw.issueKey({ name: 'not leaked' });
  const body = matches(key);
  const attempts: Array<[string, Record<string, string>, string?]> = [
    ['unsigned', {}],
    ['no identifier', { 'github-public-key-signature': signature(body) }],
    ['signed by a stranger', { 'github-public-key-identifier': IDENTIFIER, 'github-public-key-signature': signature(body, stranger.privateKey) }],
    ['unknown identifier', { 'github-public-key-identifier': 'f'.repeat(64), 'github-public-key-signature': signature(body) }],
    ['garbage signature', { 'github-public-key-identifier': IDENTIFIER, 'github-public-key-signature': 'bm90IGEgc2lnbmF0dXJl' }],
    ['body changed after signing', { 'github-public-key-identifier': IDENTIFIER, 'github-public-key-signature': signature(matches('cgk_something_else')) }],
    ['a signature too long to be one', { 'github-public-key-identifier': IDENTIFIER, 'github-public-key-signature': 'A'.repeat(200) }],
    ['look-alike identifier (upper case)', { 'github-public-key-identifier': IDENTIFIER.toUpperCase(), 'github-public-key-signature': signature(body) }],
  ];
  for (const [what, headers] of attempts) {
    const answer = await report(body, headers);
    expect({ what, status: answer.status, error: answer.json().error }).toEqual({ what, status: 401, error: expect.objectContaining({ code: 'invalid_signature', type: 'invalid_request_error' }) });
    expect(answer.body).not.toContain(key);
  }
  expect((await chat(key)).status).toBe(200);
});

test('a signed report that is not a list of matches is 400, naming what is wrong, and revokes nothing; a match missing only its type still counts', async () => {
  const { key } = await f.gw.issueKey({ name: 'kept' });
  for (const [body, param] of [
    [JSON.stringify({ token: key }), null],
    [JSON.stringify([{ token: 42, type: 'chatgate_api_key' }, { token: key, type: 'chatgate_api_key' }]), '[0].token'],
  ] as const) {
    const answer = await signed(body);
    expect({ status: answer.status, param: answer.json().error.param }).toEqual({ status: 400, param });
    expect(answer.body).not.toContain(key);
  }
  expect((await signed('[{"token": "cgk_')).status).toBe(400); // signed, but not JSON
  // Compressed: never inflated (a small body could cost a large one): its bytes are not a report.
  const gzipped = gzipSync(Buffer.from(matches(key)));
  const compressed = await request(f.gw.url, { ca: f.gw.ca, path: '/secret-scanning/github', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip', 'github-public-key-identifier': IDENTIFIER, 'github-public-key-signature': sign('sha256', gzipped, github.privateKey).toString('base64') }, body: gzipped });
  expect({ status: compressed.status, code: compressed.json().error.code }).toEqual({ status: 415, code: 'unsupported_content_encoding' });
  expect((await chat(key)).status).toBe(200);
  // A match GitHub sends without a type (a field it changed): the key in it is still revoked.
  const { key: untyped } = await f.gw.issueKey({ name: 'untyped' });
  const body = JSON.stringify([{ token: untyped }]);
  expect((await signed(body)).json()).toEqual([{ token_raw: untyped, token_type: '', label: 'true_positive' }]);
  expect((await chat(untyped)).status).toBe(401);
});

test('the admin API takes other scanners’ lists: revoked and audited, the strings never repeated', async () => {
  const { key, id } = await f.gw.issueKey({ name: 'found by trufflehog' });
  const lookAlike = key.slice(0, -1) + (key.endsWith('a') ? 'b' : 'a'); // its checksum fails: no lookup
  const answer = await admin('POST', '/keys/leaked', { keys: [key, lookAlike, 'sk-proj-not-ours'] });
  expect(answer.status).toBe(200);
  expect(answer.json()).toEqual({
    object: 'list',
    data: [
      { label: 'true_positive', keyId: id, revoked: true },
      { label: 'false_positive', revoked: false },
      { label: 'false_positive', revoked: false },
    ],
  });
  expect(answer.body).not.toContain(key);
  expect((await chat(key)).status).toBe(401);
  expect((await admin('POST', '/keys/leaked', [key])).status).toBe(400); // a bare list: the body is an object
  expect((await admin('POST', '/keys/leaked', { keys: [] })).status).toBe(400);
  expect((await admin('POST', '/keys/leaked', { keys: [key], reason: 'x' })).json().error.param).toBe('reason'); // unknown fields refused
  const unauthenticated = await request(f.gw.adminUrl, { method: 'POST', path: '/admin/api/keys/leaked', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ keys: [key] }) });
  expect(unauthenticated.status).toBe(401);
});

test('a secret a rotation replaced: leaked during its grace, it revokes the key; after a rotation that ended it, it is a false positive', async () => {
  const { key: old, id } = await f.gw.issueKey({ name: 'rotated, then leaked' });
  const graceful = await admin('POST', `/keys/${id}/rotate`, { graceSeconds: 600 });
  const fresh = graceful.json<{ key: string }>().key;
  expect((await chat(old)).status).toBe(200); // in its grace: live
  expect((await admin('POST', '/keys/leaked', { keys: [old] })).json<{ data: unknown }>().data).toEqual([{ label: 'true_positive', keyId: id, revoked: true }]);
  expect((await chat(fresh)).status).toBe(401);

  const { key: gone, id: other } = await f.gw.issueKey({ name: 'rotated at once, then leaked' });
  const rotated = (await admin('POST', `/keys/${other}/rotate`)).json<{ key: string }>().key;
  expect((await admin('POST', '/keys/leaked', { keys: [gone] })).json<{ data: unknown }>().data).toEqual([{ label: 'false_positive', revoked: false }]);
  expect((await chat(rotated)).status).toBe(200); // a dead secret revokes nothing

  const { key: ended, id: third } = await f.gw.issueKey({ name: 'grace over, then leaked' });
  const after = (await admin('POST', `/keys/${third}/rotate`, { graceSeconds: 1 })).json<{ key: string; previousKeyExpiresAt: string }>();
  while (Date.now() <= Date.parse(after.previousKeyExpiresAt)) await sleep(50);
  expect((await admin('POST', '/keys/leaked', { keys: [ended] })).json<{ data: unknown }>().data).toEqual([{ label: 'false_positive', revoked: false }]);
  expect((await chat(after.key)).status).toBe(200);
});

test('the default config trusts no signing key; one that is not a public key is refused at start, naming it', async () => {
  const config = parseConfig({ providers: { mock: { workers: ['http://127.0.0.1:9'] } } });
  expect(config.secretScanning.github.publicKeys).toEqual([]);
  const withKeys = (publicKeys: unknown) => () => parseConfig({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, secretScanning: { github: { publicKeys } } });
  expect(withKeys([{ identifier: 'x', key: 'not a key' }])).toThrow(/secretScanning\.github\.publicKeys\[0\]\.key: must be a PEM public key/);
  // The private half pasted by mistake, another curve, an RSA key, one identifier twice: refused too.
  const pem = (key: KeyObject) => key.export({ type: key.type === 'private' ? 'pkcs8' : 'spki', format: 'pem' }) as string;
  expect(withKeys([{ identifier: 'x', key: pem(github.privateKey) }])).toThrow(/publicKeys\[0\]\.key/);
  expect(withKeys([{ identifier: 'x', key: pem(generateKeyPairSync('ec', { namedCurve: 'secp384r1' }).publicKey) }])).toThrow(/publicKeys\[0\]\.key/);
  expect(withKeys([{ identifier: 'x', key: pem(generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey) }])).toThrow(/publicKeys\[0\]\.key/);
  expect(withKeys([{ identifier: 'x', key: pem(github.publicKey) }, { identifier: 'x', key: pem(stranger.publicKey) }])).toThrow(/each identifier may be listed once/);
  expect(withKeys([{ identifier: 'x', key: pem(github.publicKey) }])).not.toThrow();
});
