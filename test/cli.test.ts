/**
 * The `chatgate` command as an operator runs it (the built CLI, real processes): key management on
 * the gateway's own store, and config errors that name the field.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { startTestGateway, type TestGateway } from './helpers/gateway';
import { bearer, chatBody, request } from './helpers/http';
import { CLI, startWorker, type WorkerProcess } from './helpers/processes';
import { issueKey } from '../src/auth/issue';
import { eventually } from './helpers/time';

let worker: WorkerProcess;
let gw: TestGateway;
let configFile: string;

beforeAll(async () => {
  worker = await startWorker();
  // A long cache TTL: a revocation by the CLI must reach the running gateway through the store's change feed.
  gw = await startTestGateway({ auth: { cacheTtlMs: 600_000, createFirstKey: false }, providers: { mock: { workers: [worker.url] } } });
  // The CLI reads the same config as the gateway, so it works on the same store.
  configFile = path.join(gw.dir, 'config.yaml');
});

afterAll(async () => {
  await gw?.stop();
  await worker?.stop();
});

function chatgate(args: string[], env: NodeJS.ProcessEnv = {}) {
  const result = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 20000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/**
 * The CLI on the running gateway's key store. Not spawnSync: the gateway runs in this process, and
 * must go on answering (and announcing changes) while the CLI works.
 */
function cli(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20000);
    child.once('error', reject);
    child.once('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

test('keys create --json prints the key once; the store keeps only its digest', async () => {
  const created = await cli(['keys', 'create', '--name', 'ci-bot', '--models', 'mock/*', '--models', 'vllm/llama-*', '--expires', '2099-01-31T00:00:00Z', '--json', '--config', configFile]);
  expect(created.status).toBe(0);
  const record = JSON.parse(created.stdout);
  expect(record).toEqual(
    expect.objectContaining({ name: 'ci-bot', models: ['mock/*', 'vllm/llama-*'], expiresAt: '2099-01-31T00:00:00.000Z', revokedAt: null }),
  );
  expect(record.id).toMatch(/^key_/);
  expect(record.key).toMatch(/^cgk_[A-Za-z0-9]{49}$/);
  expect(record.digest).toBeUndefined();
  // The database and its write-ahead log, where a new row is until a checkpoint.
  const file = [gw.storeFile, `${gw.storeFile}-wal`].map((part) => readFileSync(part).toString('latin1')).join('');
  expect(file).not.toContain(record.key);
  expect(file).toContain(record.id);
});

test('keys create --endpoints limits the key to those endpoints on the running gateway', async () => {
  const created = await cli(['keys', 'create', '--name', 'embedder', '--endpoints', 'embeddings', '--endpoints', 'completions,embeddings', '--json', '--config', configFile]);
  expect(created.status).toBe(0);
  const record = JSON.parse(created.stdout) as { key: string; endpoints: string[] };
  expect(record.endpoints).toEqual(['embeddings', 'completions']);
  const embeddings = await request(gw.url, { ca: gw.ca, path: '/v1/embeddings', headers: bearer(record.key), body: JSON.stringify({ model: 'mock/echo', input: 'hello' }) });
  expect(embeddings.status).toBe(200);
  const chat = await request(gw.url, { ca: gw.ca, headers: bearer(record.key), body: chatBody() });
  expect(chat.status).toBe(403);
  expect(chat.json<{ error: { code: string } }>().error.code).toBe('endpoint_not_allowed');
});

test('keys list shows ids and names, never keys or digests', async () => {
  const created = JSON.parse((await cli(['keys', 'create', '--name', 'listed', '--json', '--config', configFile])).stdout);
  const listed = await cli(['keys', 'list', '--json', '--config', configFile]);
  expect(listed.status).toBe(0);
  const records = JSON.parse(listed.stdout) as Array<Record<string, unknown>>;
  expect(records.map((r) => r.id)).toContain(created.id);
  expect(listed.stdout).not.toContain(created.key);
  expect(records.every((r) => r.digest === undefined && r.key === undefined)).toBe(true);
  const table = await cli(['keys', 'list', '--config', configFile]);
  expect(table.stdout).toMatch(new RegExp(`${created.id}\\s+cgk_\\S+…\\s+listed\\s+active`));
});

test('a key revoked with the CLI is refused by the running gateway within about a second, whatever the cache TTL', async () => {
  const { id, key } = JSON.parse((await cli(['keys', 'create', '--name', 'short-lived', '--json', '--config', configFile])).stdout);
  expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);

  const revoked = await cli(['keys', 'revoke', id, '--config', configFile]);
  expect(revoked.status).toBe(0);
  expect(revoked.stdout).toContain(`revoked ${id}`);
  const revokedAt = performance.now();
  const status = await eventually(async () => {
    const response = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() });
    return response.status === 401 ? response.json().error.code : undefined;
  }, 5000);
  expect(status).toBe('invalid_api_key');
  expect(performance.now() - revokedAt).toBeLessThan(2500); // the file is polled every second
});

test('keys list writes a name with control characters (from a file edited by hand) escaped: it forges no row', async () => {
  await issueKey(gw.store, { name: 'x\nkey_forged\tcgk_0000\tadmin\tactive' });
  const listed = await cli(['keys', 'list', '--config', configFile]);
  expect(listed.status).toBe(0);
  expect(listed.stdout).toContain('x\\u000akey_forged\\u0009cgk_0000');
  expect(listed.stdout.split('\n').some((line) => line.startsWith('key_forged'))).toBe(false);
});

test('accounts and members from the CLI: made, listed, and a key made in the account; the same refusals as the admin API', async () => {
  const config = ['--config', configFile];
  const created = await cli(['accounts', 'create', '--name', 'team-cli', '--tokens-per-day', '50000', '--budget-per-month', '250.5', '--json', ...config]);
  expect(created.status).toBe(0);
  const account = JSON.parse(created.stdout) as { id: string; name: string; quota: unknown };
  expect(account).toMatchObject({ name: 'team-cli', quota: { tokensPerDay: 50000, tokensPerMonth: null }, budget: { perDay: null, perMonth: 250.5 } });
  for (const amount of ['-1', 'lots', '', '1e7']) {
    const refused = await cli(['accounts', 'create', '--name', 'team-refused', `--budget-per-day=${amount}`, ...config]);
    expect({ amount, status: refused.status, stderr: refused.stderr.split('\n')[0] }).toEqual({ amount, status: 2, stderr: expect.stringContaining('--budget-per-day must be an amount') });
  }
  const again = await cli(['accounts', 'create', '--name', 'team-cli', ...config]);
  expect(again.status).toBe(1);
  expect(again.stderr).toContain("An account is already named 'team-cli'");
  expect((await cli(['accounts', 'list', ...config])).stdout).toContain(`${account.id}\tteam-cli\tquota per day 50000, per month none; budget per day none, per month 250.5`);

  const added = await cli(['members', 'add', '--account', account.id, '--email', 'Lead@Example.com', '--role', 'owner', '--json', ...config]);
  expect(added.status).toBe(0);
  expect(JSON.parse(added.stdout)).toMatchObject({ accountId: account.id, email: 'lead@example.com', role: 'owner', addedBy: 'cli', passwordLink: expect.stringMatching(/^\/console\/#set-password=[A-Za-z0-9_-]{43}$/) });
  // Without --json, the link is a whole URL to open (console.publicUrl, else the listen address).
  const printed = await cli(['members', 'add', '--account', account.id, '--email', 'second@example.com', '--role', 'member', ...config]);
  expect(printed.stdout).toMatch(/^second@example\.com is member of acc_\S+\nset the password once at https:\/\/[^/<>\s]+\/console\/#set-password=[A-Za-z0-9_-]{43}\n$/);
  expect((await cli(['members', 'list', '--account', account.id, ...config])).stdout).toMatch(/^lead@example\.com\towner\tadded .* by cli$/m);
  const lastOwner = await cli(['members', 'remove', '--account', account.id, '--email', 'lead@example.com', ...config]);
  expect(lastOwner.status).toBe(1);
  expect(lastOwner.stderr).toContain('at least one owner');

  const key = JSON.parse((await cli(['keys', 'create', '--name', 'in-team', '--account', account.id, '--budget-per-day', '3', '--json', ...config])).stdout) as { accountId: string; budget: unknown };
  expect(key.accountId).toBe(account.id);
  expect(key.budget).toEqual({ perDay: 3, perMonth: null });
  expect((await cli(['keys', 'create', '--name', 'nowhere', '--account', 'acc_nope', ...config])).status).toBe(2);
});

test('every change the CLI makes is audited, by `cli`: keys create, rotate and revoke', async () => {
  const { id } = JSON.parse((await cli(['keys', 'create', '--name', 'audited', '--json', '--config', configFile])).stdout) as { id: string };
  expect((await cli(['keys', 'rotate', id, '--config', configFile])).status).toBe(0);
  expect((await cli(['keys', 'revoke', id, '--config', configFile])).status).toBe(0);
  const store = gw.store;
  const events = (await store.listAudit(null, 1000)).filter((event) => event.target === id);
  expect(events.map((event) => [event.action, event.actor]).sort()).toEqual([
    ['key.created', 'cli'],
    ['key.revoked', 'cli'],
    ['key.rotated', 'cli'],
  ]);
  expect((await store.get(id))?.createdBy).toBe('cli');
});

test('keys rotate --grace-seconds: the old secret keeps working until the time printed; a bad value is a usage error that rotates nothing', async () => {
  const { id, key: old } = JSON.parse((await cli(['keys', 'create', '--name', 'graceful', '--json', '--config', configFile])).stdout) as { id: string; key: string };
  for (const bad of ['604801', '-1', '1.5', 'soon']) {
    const refused = await cli(['keys', 'rotate', id, `--grace-seconds=${bad}`, '--config', configFile]);
    expect({ bad, status: refused.status, said: refused.stderr.includes('--grace-seconds must be a whole number') }).toEqual({ bad, status: 2, said: true });
  }
  expect((await request(gw.url, { ca: gw.ca, headers: bearer(old), body: chatBody() })).status).toBe(200); // not rotated
  const rotated = await cli(['keys', 'rotate', id, '--grace-seconds', '3600', '--json', '--config', configFile]);
  const view = JSON.parse(rotated.stdout) as { key: string; previousKeyExpiresAt: string };
  expect(Date.parse(view.previousKeyExpiresAt) - Date.now()).toBeGreaterThan(3_500_000);
  for (const secret of [old, view.key]) expect((await request(gw.url, { ca: gw.ca, headers: bearer(secret), body: chatBody() })).status).toBe(200);
  const plain = await cli(['keys', 'rotate', id, '--config', configFile]);
  expect(plain.stdout).toContain('the old one stops working');
});

test('members password-link: a one-time link that works once, voids the older one, and is audited by `cli`', async () => {
  const origin = `https://${new URL(gw.url).host}`;
  const setPassword = (token: string) =>
    request(gw.url, { ca: gw.ca, path: '/console/api/password', headers: { origin, 'content-type': 'application/json' }, body: JSON.stringify({ token, password: 'the first owner password' }) });
  // The gateway's first start made admin@localhost; their link is lost (the banner was not kept).
  const older = await cli(['members', 'password-link', '--email', 'admin@localhost', '--config', configFile]);
  expect(older.status).toBe(0);
  const olderToken = /^https:\/\/\S+\/console\/#set-password=([A-Za-z0-9_-]{43})$/m.exec(older.stdout)![1]!;
  const newer = await cli(['members', 'password-link', '--email', 'Admin@localhost', '--json', '--config', configFile]);
  expect(newer.status).toBe(0);
  const answer = JSON.parse(newer.stdout) as { email: string; path: string; url: string };
  expect(answer).toEqual({ email: 'admin@localhost', path: expect.stringMatching(/^\/console\/#set-password=[A-Za-z0-9_-]{43}$/), url: expect.stringMatching(/^https:\/\//) });
  expect(answer.url.endsWith(answer.path)).toBe(true);
  expect((await setPassword(olderToken)).json().error.code).toBe('invalid_link'); // the newer one voided it
  const newerToken = answer.path.split('#set-password=')[1]!;
  expect((await setPassword(newerToken)).json()).toEqual({ email: 'admin@localhost' });
  expect((await setPassword(newerToken)).status).toBe(400); // once

  const events = (await gw.store.listAudit(null, 1000)).filter((event) => event.action === 'password.link_created' && event.actor === 'cli' && event.target === 'admin@localhost');
  expect(events).toHaveLength(2);
  expect(JSON.stringify(events)).not.toContain(newerToken);

  const nobody = await cli(['members', 'password-link', '--email', 'nobody@example.com', '--config', configFile]);
  expect(nobody.status).toBe(1);
  expect(nobody.stdout).toBe('');
});

test("members remove revokes the keys the member made in the account; --transfer-keys-to hands them to an owner", async () => {
  const config = ['--config', configFile];
  const account = (JSON.parse((await cli(['accounts', 'create', '--name', 'team-leavers', '--json', ...config])).stdout) as { id: string }).id;
  for (const [email, role] of [['boss@example.com', 'owner'], ['leaver@example.com', 'member'], ['stayer@example.com', 'member']]) {
    expect((await cli(['members', 'add', '--account', account, '--email', email!, '--role', role!, ...config])).status).toBe(0);
  }
  const store = gw.store;
  const leavers = await issueKey(store, { name: 'leaver key', accountId: account, createdBy: 'leaver@example.com' });
  const stayers = await issueKey(store, { name: 'stayer key', accountId: account, createdBy: 'stayer@example.com' });
  const chat = (key: string) => request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() });
  expect((await chat(leavers.key)).status).toBe(200);

  const removed = await cli(['members', 'remove', '--account', account, '--email', 'leaver@example.com', ...config]);
  expect(removed.status).toBe(0);
  expect(removed.stdout).toContain('1 of their keys revoked');
  expect(await eventually(async () => ((await chat(leavers.key)).status === 401 ? true : undefined), 5000)).toBe(true);
  expect((await chat(stayers.key)).status).toBe(200);

  const handed = await cli(['members', 'remove', '--account', account, '--email', 'stayer@example.com', '--transfer-keys-to', 'boss@example.com', ...config]);
  expect(handed.stdout).toContain('1 of their keys now belong to boss@example.com');
  expect((await store.get(stayers.record.id))).toMatchObject({ createdBy: 'boss@example.com', revokedAt: null });
  expect((await chat(stayers.key)).status).toBe(200);
  const audit = (await store.listAudit(account, 100)).filter((event) => event.target === leavers.record.id || event.target === stayers.record.id);
  expect(audit.map((event) => [event.action, event.actor, event.details]).sort()).toEqual([
    ['key.revoked', 'cli', { reason: 'member_removed', member: 'leaver@example.com' }],
    ['key.transferred', 'cli', { from: 'stayer@example.com', to: 'boss@example.com' }],
  ]);
});

test('usage errors exit 2 and say what is wrong; an unknown id exits 1', async () => {
  const noName = await cli(['keys', 'create', '--config', configFile]);
  expect(noName.status).toBe(2);
  expect(noName.stderr).toContain('--name');
  const badDate = await cli(['keys', 'create', '--name', 'x', '--expires', 'next tuesday', '--config', configFile]);
  expect(badDate.status).toBe(2);
  expect(badDate.stderr).toContain('ISO-8601');
  const forged = await cli(['keys', 'create', '--name', 'ok\nkey_forged\tactive', '--config', configFile]);
  expect(forged.status).toBe(2);
  expect(forged.stderr).toContain('--name must not hold control characters');
  const huge = await cli(['keys', 'create', '--name', 'x', '--rpm', '99999999999', '--config', configFile]);
  expect(huge.status).toBe(2);
  expect(huge.stderr).toContain('--rpm must be a whole number from 0 (no limit) to 2147483647');
  const badEndpoint = await cli(['keys', 'create', '--name', 'x', '--endpoints', 'chat,images', '--config', configFile]);
  expect(badEndpoint.status).toBe(2);
  expect(badEndpoint.stderr).toContain("--endpoints takes chat, completions, embeddings, responses, not 'images'");
  const unknown = await cli(['keys', 'revoke', 'key_nope', '--config', configFile]);
  expect(unknown.status).toBe(1);
  expect(unknown.stderr).toContain('key_nope');
  expect((await cli(['frobnicate'])).status).toBe(2);
});

describe('a bad config fails at start with the field named', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const write = (name: string, document: unknown) => {
    const file = path.join(dir, name);
    writeFileSync(file, typeof document === 'string' ? document : YAML.stringify(document));
    return file;
  };

  test.each([
    ['a port out of range', { listen: { port: 70000 }, providers: { mock: { workers: ['http://127.0.0.1:1'] } } }, 'listen.port'],
    ['a worker that is not a URL', { providers: { mock: { workers: ['not a url'] } } }, 'providers.mock.workers[0]'],
    ['a misspelt setting', { lsten: { port: 1 }, providers: { mock: { workers: ['http://127.0.0.1:1'] } } }, 'lsten'],
    ['no providers', { providers: {} }, 'providers'],
    ['an upstream key variable that is not set', { providers: { mock: { workers: ['http://127.0.0.1:1'], apiKeyEnv: 'CHATGATE_TEST_UNSET_VAR' } } }, 'CHATGATE_TEST_UNSET_VAR'],
    ['YAML that does not parse', 'listen: { port: [', 'not valid YAML'],
  ])('%s', (name, document, named) => {
    const file = write(`${name.replace(/\W+/g, '-')}.yaml`, document);
    for (const run of [() => chatgate(['serve', '--config', file]), () => chatgate(['serve'], { CHATGATE_CONFIG: file })]) {
      const result = run();
      expect(result.status).toBe(1);
      expect(result.stderr).toContain(named);
      expect(result.stderr).not.toMatch(/\n\s+at /); // a message, not a stack trace
    }
  });
});

test('serve that fails after starting the mock worker (its port taken) exits 1 with the reason, and leaves no mock worker behind', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-cli-'));
  try {
    const busyPort = Number(new URL(gw.url).port); // the running gateway holds it
    const mockPort = 20000 + Math.floor(Math.random() * 20000);
    const file = path.join(dir, 'config.yaml');
    writeFileSync(
      file,
      YAML.stringify({ listen: { host: '127.0.0.1', port: busyPort }, admin: { host: '127.0.0.1', port: 0 }, dataDir: dir, mockWorker: { host: '127.0.0.1', port: mockPort }, providers: { mock: { workers: [`http://127.0.0.1:${mockPort}`] } } }),
    );
    const served = chatgate(['serve', '--config', file]);
    expect(served.status).toBe(1); // not killed by spawnSync's 20 s timeout: it exited by itself
    expect(served.stderr).toContain('EADDRINUSE');
    const probe = spawnSync('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '2', `http://127.0.0.1:${mockPort}/health`], { encoding: 'utf8' });
    expect(probe.stdout).toBe('000'); // the mock worker went with it
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('keys check: a fresh key holds (exit 0), one mistyped does not (exit 1); the old form counts; from stdin with -; the string never printed back', async () => {
  const key = (await cli(['keys', 'create', '--name', 'checked', '--json', '--config', configFile])).stdout;
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
