/**
 * `chatgate keys` as an operator runs it (the built CLI, real processes) on a running gateway's store:
 * create, list, revoke, rotate and check, each change audited and seen by the gateway; usage errors.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { issueKey } from '../../src/auth/issue';
import { cliGateway, cli } from '../helpers/cli';
import { bearer, chatBody, request } from '../helpers/http';
import { CLI } from '../helpers/processes';
import { eventually } from '../helpers/time';

const f = cliGateway();

test('keys create --json prints the key once; the store keeps only its digest', async () => {
  const created = await cli(['keys', 'create', '--name', 'ci-bot', '--models', 'mock/*', '--models', 'vllm/llama-*', '--expires', '2099-01-31T00:00:00Z', '--json', '--config', f.configFile]);
  expect(created.status).toBe(0);
  const record = JSON.parse(created.stdout);
  expect(record).toEqual(
    expect.objectContaining({ name: 'ci-bot', models: ['mock/*', 'vllm/llama-*'], expiresAt: '2099-01-31T00:00:00.000Z', revokedAt: null }),
  );
  expect(record.id).toMatch(/^key_/);
  expect(record.key).toMatch(/^cgk_[A-Za-z0-9]{49}$/);
  expect(record.digest).toBeUndefined();
  // The database and its write-ahead log, where a new row is until a checkpoint.
  const file = [f.gw.storeFile, `${f.gw.storeFile}-wal`].map((part) => readFileSync(part).toString('latin1')).join('');
  expect(file).not.toContain(record.key);
  expect(file).toContain(record.id);
});

test('keys create --endpoints limits the key to those endpoints on the running gateway', async () => {
  const created = await cli(['keys', 'create', '--name', 'embedder', '--endpoints', 'embeddings', '--endpoints', 'completions,embeddings', '--json', '--config', f.configFile]);
  expect(created.status).toBe(0);
  const record = JSON.parse(created.stdout) as { key: string; endpoints: string[] };
  expect(record.endpoints).toEqual(['embeddings', 'completions']);
  const embeddings = await request(f.gw.url, { ca: f.gw.ca, path: '/v1/embeddings', headers: bearer(record.key), body: JSON.stringify({ model: 'mock/echo', input: 'hello' }) });
  expect(embeddings.status).toBe(200);
  const chat = await request(f.gw.url, { ca: f.gw.ca, headers: bearer(record.key), body: chatBody() });
  expect(chat.status).toBe(403);
  expect(chat.json<{ error: { code: string } }>().error.code).toBe('endpoint_not_allowed');
});

test('keys list shows ids and names, never keys or digests', async () => {
  const created = JSON.parse((await cli(['keys', 'create', '--name', 'listed', '--json', '--config', f.configFile])).stdout);
  const listed = await cli(['keys', 'list', '--json', '--config', f.configFile]);
  expect(listed.status).toBe(0);
  const records = JSON.parse(listed.stdout) as Array<Record<string, unknown>>;
  expect(records.map((r) => r.id)).toContain(created.id);
  expect(listed.stdout).not.toContain(created.key);
  expect(records.every((r) => r.digest === undefined && r.key === undefined)).toBe(true);
  const table = await cli(['keys', 'list', '--config', f.configFile]);
  expect(table.stdout).toMatch(new RegExp(`${created.id}\\s+cgk_\\S+…\\s+listed\\s+active`));
});

test('a key revoked with the CLI is refused by the running gateway within about a second, whatever the cache TTL', async () => {
  const { id, key } = JSON.parse((await cli(['keys', 'create', '--name', 'short-lived', '--json', '--config', f.configFile])).stdout);
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);

  const revoked = await cli(['keys', 'revoke', id, '--config', f.configFile]);
  expect(revoked.status).toBe(0);
  expect(revoked.stdout).toContain(`revoked ${id}`);
  const revokedAt = performance.now();
  const status = await eventually(async () => {
    const response = await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() });
    return response.status === 401 ? response.json().error.code : undefined;
  }, 5000);
  expect(status).toBe('invalid_api_key');
  expect(performance.now() - revokedAt).toBeLessThan(2500); // the file is polled every second
});

test('keys list writes a name with control characters (from a file edited by hand) escaped: it forges no row', async () => {
  await issueKey(f.gw.store, { name: 'x\nkey_forged\tcgk_0000\tadmin\tactive' });
  const listed = await cli(['keys', 'list', '--config', f.configFile]);
  expect(listed.status).toBe(0);
  expect(listed.stdout).toContain('x\\u000akey_forged\\u0009cgk_0000');
  expect(listed.stdout.split('\n').some((line) => line.startsWith('key_forged'))).toBe(false);
});

test('every change the CLI makes is audited, by `cli`: keys create, rotate and revoke', async () => {
  const { id } = JSON.parse((await cli(['keys', 'create', '--name', 'audited', '--json', '--config', f.configFile])).stdout) as { id: string };
  expect((await cli(['keys', 'rotate', id, '--config', f.configFile])).status).toBe(0);
  expect((await cli(['keys', 'revoke', id, '--config', f.configFile])).status).toBe(0);
  const store = f.gw.store;
  const events = (await store.listAudit(null, 1000)).filter((event) => event.target === id);
  expect(events.map((event) => [event.action, event.actor]).sort()).toEqual([
    ['key.created', 'cli'],
    ['key.revoked', 'cli'],
    ['key.rotated', 'cli'],
  ]);
  expect((await store.get(id))?.createdBy).toBe('cli');
});

test('keys rotate --grace-seconds: the old secret keeps working until the time printed; a bad value is a usage error that rotates nothing', async () => {
  const { id, key: old } = JSON.parse((await cli(['keys', 'create', '--name', 'graceful', '--json', '--config', f.configFile])).stdout) as { id: string; key: string };
  for (const bad of ['604801', '-1', '1.5', 'soon']) {
    const refused = await cli(['keys', 'rotate', id, `--grace-seconds=${bad}`, '--config', f.configFile]);
    expect({ bad, status: refused.status, said: refused.stderr.includes('--grace-seconds must be a whole number') }).toEqual({ bad, status: 2, said: true });
  }
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(old), body: chatBody() })).status).toBe(200); // not rotated
  const rotated = await cli(['keys', 'rotate', id, '--grace-seconds', '3600', '--json', '--config', f.configFile]);
  const view = JSON.parse(rotated.stdout) as { key: string; previousKeyExpiresAt: string };
  expect(Date.parse(view.previousKeyExpiresAt) - Date.now()).toBeGreaterThan(3_500_000);
  for (const secret of [old, view.key]) expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(secret), body: chatBody() })).status).toBe(200);
  const plain = await cli(['keys', 'rotate', id, '--config', f.configFile]);
  expect(plain.stdout).toContain('the old one stops working');
});

test('usage errors exit 2 and say what is wrong; an unknown id exits 1', async () => {
  const noName = await cli(['keys', 'create', '--config', f.configFile]);
  expect(noName.status).toBe(2);
  expect(noName.stderr).toContain('--name');
  const badDate = await cli(['keys', 'create', '--name', 'x', '--expires', 'next tuesday', '--config', f.configFile]);
  expect(badDate.status).toBe(2);
  expect(badDate.stderr).toContain('ISO-8601');
  const forged = await cli(['keys', 'create', '--name', 'ok\nkey_forged\tactive', '--config', f.configFile]);
  expect(forged.status).toBe(2);
  expect(forged.stderr).toContain('--name must not hold control characters');
  const huge = await cli(['keys', 'create', '--name', 'x', '--rpm', '99999999999', '--config', f.configFile]);
  expect(huge.status).toBe(2);
  expect(huge.stderr).toContain('--rpm must be a whole number from 0 (no limit) to 2147483647');
  const badEndpoint = await cli(['keys', 'create', '--name', 'x', '--endpoints', 'chat,images', '--config', f.configFile]);
  expect(badEndpoint.status).toBe(2);
  expect(badEndpoint.stderr).toContain("--endpoints takes chat, completions, embeddings, responses, not 'images'");
  const unknown = await cli(['keys', 'revoke', 'key_nope', '--config', f.configFile]);
  expect(unknown.status).toBe(1);
  expect(unknown.stderr).toContain('key_nope');
  expect((await cli(['frobnicate'])).status).toBe(2);
});

test('keys check: a fresh key holds (exit 0), one mistyped does not (exit 1); the old form counts; from stdin with -; the string never printed back', async () => {
  const key = (await cli(['keys', 'create', '--name', 'checked', '--json', '--config', f.configFile])).stdout;
  const fresh = JSON.parse(key).key as string;
  const flip = (k: string) => k.slice(0, 20) + (k[20] === 'a' ? 'b' : 'a') + k.slice(21);
  const outcomes = [
    ['fresh', fresh, 0],
    ['mistyped', flip(fresh), 1],
    ['cut short', fresh.slice(0, -2), 1],
    ['old form', `cgk_${'Ab-_'.repeat(10)}xyz`, 0],
    ['another vendor', 'sk-proj-0123456789abcdefghij', 1],
  ] as const;
  for (const [what, text, status] of outcomes) {
    const answer = spawnSync(process.execPath, [CLI, 'keys', 'check', text], { encoding: 'utf8' });
    expect({ what, status: answer.status }).toEqual({ what, status });
    expect(answer.stdout).toMatch(status === 0 ? /^a well-formed chatgate key/ : /^not a chatgate key/);
    expect(answer.stdout + answer.stderr).not.toContain(text);
  }
  const piped = spawnSync(process.execPath, [CLI, 'keys', 'check', '-'], { encoding: 'utf8', input: `${fresh}\n` });
  expect(piped.status).toBe(0);
  expect(piped.stdout).toMatch(/its checksum holds/);
});
