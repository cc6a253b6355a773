/**
 * End users through a real gateway: named by `X-Chatgate-End-User`, `safety_identifier` or `user`,
 * kept as a digest (the id itself is in no usage row), and usage broken down by end user and by
 * model (admin API), asked with the id or its digest. The hostile client: one that names a new end
 * user on every request makes no more ledger rows than the cap; fields of the wrong shape are refused.
 */
import { existsSync, readFileSync } from 'node:fs';
import { endUserDigest } from '../../src/accounts/end-users';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';
import { eventually } from '../helpers/time';

const TOKEN = 'admin-token-for-the-end-users-test-0123';
const PAIRS = 8;
const f = gatewayWithWorker({
  admin: { host: '127.0.0.1', port: 0, token: TOKEN },
  auth: { createFirstKey: false, lastUsedFlushMs: 100 },
  usage: { maxPairsPerKeyDay: PAIRS },
});

type Share = { requests: number; refused: number; promptTokens: number; completionTokens: number; cost: number; endUser?: string; model?: string };
const admin = (path: string) => request(f.gw.adminUrl, { method: 'GET', path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}` } });
const breakdown = async (accountId: string, query: Record<string, string>) => {
  const answer = await admin(`/accounts/${accountId}/usage/breakdown?${new URLSearchParams(query)}`);
  expect(answer.status).toBe(200);
  return answer.json<{ by: string; data: Share[] }>().data;
};
/**
 * A body as bytes: with a string body, Node's client writes the headers in the body's encoding
 * (UTF-8) when it sends both at once; with bytes, as latin1: each character of a header string one
 * byte, as a test that sends raw header bytes needs.
 */
const bytes = (body: Record<string, unknown>) => Buffer.from(chatBody(body));
const accountOf = async (id: string) => (await admin('/keys')).json<{ data: Array<{ id: string; accountId: string }> }>().data.find((k) => k.id === id)!.accountId;

test('the header, then safety_identifier, then user name the end user; usage by end user and by model, asked by id or digest; the id is stored nowhere', async () => {
  const { key, id } = await f.gw.issueKey({ name: 'end users' });
  const ask = async (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    expect((await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(key), 'x-mock-tokens': '4', ...headers }, body: bytes(body) })).status).toBe(200);
  await ask({ user: 'alice@example.com' });
  await ask({ user: 'alice@example.com', stream: true });
  await ask({ user: 'alice@example.com', model: 'mock/other' });
  await ask({ user: 'alice@example.com', safety_identifier: 'bob-7' }); // safety_identifier over user
  await ask({ user: 'alice@example.com', safety_identifier: 'bob-7' }, { 'x-chatgate-end-user': 'carol' }); // the header over both
  await ask({ user: '' }); // empty: none
  await ask({});
  // A header's UTF-8 bytes (Node reads them as latin1) name the same end user as the body's text.
  await ask({ user: 'alice@example.com' }, { 'x-chatgate-end-user': Buffer.from('josé').toString('latin1') });
  await ask({ user: 'josé' });
  const accountId = await accountOf(id);
  const users = await eventually(async () => {
    const rows = await breakdown(accountId, { by: 'endUser', keyId: id });
    return rows.reduce((sum, row) => sum + row.requests, 0) === 9 ? rows : undefined;
  }, 10_000);
  const [alice, bob, carol, jose] = ['alice@example.com', 'bob-7', 'carol', 'josé'].map((name) => endUserDigest(accountId, name));
  expect(new Map(users.map((row) => [row.endUser, row.requests]))).toEqual(new Map([[alice, 3], [bob, 1], [carol, 1], [jose, 2], ['', 2]]));
  for (const row of users) expect(row.promptTokens + row.completionTokens).toBeGreaterThan(0);
  // Asked with the id the client sent, or with its digest: the same rows, alice's by model.
  const byId = await breakdown(accountId, { by: 'model', endUser: 'alice@example.com' });
  expect(new Map(byId.map((row) => [row.model, row.requests]))).toEqual(new Map([['mock/echo', 2], ['mock/other', 1]]));
  expect(await breakdown(accountId, { by: 'model', endUser: alice! })).toEqual(byId);
  // Another account's digest of the same id is another digest: nothing of this account's.
  expect(endUserDigest('acc_someone_else', 'alice@example.com')).not.toBe(alice);
  // The ids are in no row of the store: only their digests.
  const stored = [f.gw.storeFile, `${f.gw.storeFile}-wal`].filter((file) => existsSync(file)).map((file) => readFileSync(file).toString('latin1')).join('');
  expect(stored).toContain(alice);
  for (const name of ['alice@example.com', 'bob-7', 'carol', 'jos']) expect(stored).not.toContain(name);
});

test('a key pasted into a model name is not kept with the usage: the ledger has it redacted', async () => {
  const { key, id } = await f.gw.issueKey({ name: 'pasted' });
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: bytes({ model: `mock/${key}` }) })).status).toBe(200);
  const accountId = await accountOf(id);
  const models = await eventually(async () => {
    const rows = await breakdown(accountId, { by: 'model', keyId: id });
    return rows.length > 0 ? rows.map((row) => row.model) : undefined;
  }, 10_000);
  expect(models).toEqual(['mock/cgk_[redacted]']);
  expect(readFileSync(f.gw.storeFile).toString('latin1') + (existsSync(`${f.gw.storeFile}-wal`) ? readFileSync(`${f.gw.storeFile}-wal`).toString('latin1') : '')).not.toContain(key.slice(4));
});

test('a client naming a new end user on every request makes at most the cap of ledger rows a day; the rest is counted under *', async () => {
  const { key, id } = await f.gw.issueKey({ name: 'many users' });
  const answers = await Promise.all(
    Array.from({ length: 3 * PAIRS }, (_, i) => request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(key), 'x-chatgate-end-user': `user-${i}` }, body: chatBody() })),
  );
  expect(answers.map((answer) => answer.status)).toEqual(answers.map(() => 200));
  const accountId = await accountOf(id);
  const rows = await eventually(async () => {
    const found = await breakdown(accountId, { by: 'endUser', keyId: id });
    return found.reduce((sum, row) => sum + row.requests, 0) === 3 * PAIRS ? found : undefined;
  }, 10_000);
  expect(rows).toHaveLength(PAIRS + 1);
  expect(rows.find((row) => row.endUser === '*')?.requests).toBe(2 * PAIRS);
  // The daily row has every request: nothing was lost to the cap.
  const days = (await admin(`/accounts/${accountId}/usage`)).json<{ data: Array<{ keyId: string; requests: number }> }>().data;
  expect(days.find((day) => day.keyId === id)?.requests).toBe(3 * PAIRS);
});

test('an end user of the wrong shape is refused, naming the field; so is a breakdown query it does not take', async () => {
  const refused = async (body: Record<string, unknown>, headers: Record<string, string> = {}) => {
    const answer = await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(f.key), ...headers }, body: bytes(body) });
    expect(answer.status).toBe(400);
    return answer.json<{ error: { code: string; param: string | null; message: string } }>().error;
  };
  expect(await refused({ user: 42 })).toMatchObject({ code: 'invalid_body', param: 'user' });
  expect(await refused({ user: { id: 'alice' } })).toMatchObject({ code: 'invalid_body', param: 'user' });
  expect(await refused({ safety_identifier: ['x'], user: 'alice' })).toMatchObject({ code: 'invalid_body', param: 'safety_identifier' });
  expect(await refused({ user: 'a'.repeat(257) })).toMatchObject({ code: 'invalid_body', param: 'user' });
  // A model name with a control character (a NUL that PostgreSQL would refuse in the usage rows).
  expect(await refused({ model: 'mock/a\u0000b' })).toMatchObject({ code: 'invalid_body', param: 'model' });
  expect(await refused({ model: 'mock/a\u0085b' })).toMatchObject({ code: 'invalid_body', param: 'model' });
  expect(await refused({}, { 'x-chatgate-end-user': Buffer.from([0xc3, 0x28]).toString('latin1') })).toMatchObject({ code: 'invalid_header', param: 'X-Chatgate-End-User' });
  const long = await refused({}, { 'x-chatgate-end-user': 'b'.repeat(257) });
  expect(long).toMatchObject({ code: 'invalid_header', param: 'X-Chatgate-End-User' });
  expect(long.message).not.toContain('bbbb'); // never quoted back
  const { id } = await f.gw.issueKey({ name: 'queries' });
  const accountId = await accountOf(id);
  for (const [query, param] of [
    ['by=key', 'by'],
    ['', 'by'],
    ['by=model&user=alice', 'user'],
    ['by=model&by=endUser', 'by'],
    ['by=model&limit=0', 'limit'],
    ['by=model&limit=1001', 'limit'],
    ['by=model&limit=1e2', 'limit'],
    ['by=model&keyId=nokey', 'keyId'],
    ['by=model&from=yesterday', 'from'],
    ['by=model&from=2026-02-30', 'from'], // Date.parse would take it as March 2
    ['by=model&from=0000-01-01', 'from'],
    ['by=model&from=2024-01-01&to=2025-01-01', 'from'], // more than 366 days
  ] as const) {
    const answer = await admin(`/accounts/${accountId}/usage/breakdown?${query}`);
    expect([query, answer.status, answer.json<{ error: { param: string } }>().error.param]).toEqual([query, 400, param]);
  }
});
