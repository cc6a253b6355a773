import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, watch, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { issueKey, publicView } from '../../src/auth/issue';
import { digestKey, generateKey } from '../../src/auth/keys';
import { FileKeyStore, removeStaleLock } from '../../src/store/file';

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-store-'));
  file = path.join(dir, 'nested', 'keys.json');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

test('a missing file is an empty store', async () => {
  const store = new FileKeyStore(file);
  expect(await store.list()).toEqual([]);
  expect(await store.findByDigest(digestKey(generateKey()))).toBeUndefined();
  await expect(store.ping()).resolves.toBeUndefined();
});

test('issued keys are found by digest and listed', async () => {
  const store = new FileKeyStore(file);
  const first = await issueKey(store, { name: 'ci', models: ['mock/*'], expiresAt: new Date('2099-01-01T00:00:00Z') });
  const second = await issueKey(store, { name: 'other' });
  expect(first.record).toMatchObject({ name: 'ci', models: ['mock/*'], expiresAt: '2099-01-01T00:00:00.000Z', revokedAt: null });
  expect(await store.findByDigest(digestKey(first.key))).toEqual(first.record);
  expect(await store.findByDigest(digestKey(second.key))).toEqual(second.record);
  expect(await store.findByDigest(digestKey(generateKey()))).toBeUndefined();
  expect(await store.list()).toEqual([first.record, second.record]);
  expect(await new FileKeyStore(file).list()).toEqual([first.record, second.record]); // it is on disk
});

test('the file holds digests only, readable by its owner only', async () => {
  const store = new FileKeyStore(file);
  const { key, record } = await issueKey(store, { name: 'ci' });
  const text = readFileSync(file, 'utf8');
  expect(text).not.toContain(key);
  expect(text).not.toContain(key.slice(record.prefix.length)); // not even the secret part
  expect(text).toContain(record.digest);
  expect(statSync(file).mode & 0o777).toBe(0o600);
  expect(statSync(path.dirname(file)).mode & 0o077).toBe(0);
  expect(publicView(record)).not.toHaveProperty('digest');
});

test('a revocation made through another instance (the CLI) is seen by a running one', async () => {
  const gateway = new FileKeyStore(file);
  const cli = new FileKeyStore(file);
  const { key, record } = await issueKey(cli, { name: 'k' });
  expect((await gateway.findByDigest(digestKey(key)))?.revokedAt).toBeNull();
  expect(await cli.revoke(record.id, new Date('2030-01-01T00:00:00Z'))).toMatchObject({ revokedAt: '2030-01-01T00:00:00.000Z' });
  expect((await gateway.findByDigest(digestKey(key)))?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  expect(statSync(file).mode & 0o777).toBe(0o600);
  expect(await cli.revoke('key_unknown', new Date())).toBeUndefined();
});

test('a second revocation keeps the first time', async () => {
  const store = new FileKeyStore(file);
  const { record } = await issueKey(store, { name: 'k' });
  await store.revoke(record.id, new Date('2030-01-01T00:00:00Z'));
  expect(await store.revoke(record.id, new Date('2031-01-01T00:00:00Z'))).toMatchObject({ revokedAt: '2030-01-01T00:00:00.000Z' });
});

test('a file that is not a key file makes reads (and readiness) fail', async () => {
  const store = new FileKeyStore(file);
  await issueKey(store, { name: 'k' });
  writeFileSync(file, '{"something": "else"}');
  await expect(store.ping()).rejects.toThrow(/not a chatgate key file/);
  writeFileSync(file, 'not json');
  await expect(store.ping()).rejects.toThrow();
  await expect(store.list()).rejects.toThrow();
});

// The gateway writes the file too (batched usage, every auth.lastUsedFlushMs), while the CLI or the
// admin API revokes keys in it. Each write reads the file, changes it and replaces it: two writers at
// once must not undo each other, or a revocation can silently disappear.
test('concurrent writes through two instances lose nothing (a revocation survives a usage flush)', async () => {
  const gateway = new FileKeyStore(file);
  const cli = new FileKeyStore(file);
  const issued = [];
  for (let i = 0; i < 5; i++) issued.push((await issueKey(cli, { name: `k${i}` })).record);
  const uses = issued.map((record) => ({ keyId: record.id, accountId: record.accountId, date: '2030-01-01', at: new Date('2030-01-01T00:00:00Z'), requests: 1, refused: 0, costNanos: 0, promptTokens: 2, completionTokens: 3 }));

  const writes = await Promise.allSettled([
    ...issued.map((record) => cli.revoke(record.id, new Date('2030-01-01T00:00:00Z'))),
    gateway.recordUse(uses),
  ]);
  expect(writes.map((write) => (write.status === 'rejected' ? `rejected: ${(write.reason as Error).message}` : 'ok'))).toEqual(Array(6).fill('ok'));

  const after = await new FileKeyStore(file).list();
  expect(after.map((record) => [record.name, record.revokedAt, record.usage.requests])).toEqual(
    issued.map((record) => [record.name, '2030-01-01T00:00:00.000Z', 1]),
  );
});

test('a burst of changes is written in a few batches: every count exact, a change that fails fails alone', async () => {
  const store = new FileKeyStore(file);
  await store.hasKeys(); // the directory exists once the store reads or writes; watch it from the first write
  mkdirSync(path.dirname(file), { recursive: true });
  const written = new Set<string>(); // each rewrite goes through a temporary file of its own name
  const watcher = watch(path.dirname(file), (_event, name) => {
    if (name && name.endsWith('.tmp')) written.add(name);
  });
  try {
    const now = new Date();
    const expiresAt = new Date(now.getTime() + 60_000);
    const account = (id: string) => ({ id, name: 'burst', createdAt: now.toISOString(), quota: { tokensPerDay: null, tokensPerMonth: null } });
    // All queued at once: the second account of the same name is refused, the rest goes through.
    const bumps = Array.from({ length: 100 }, () => store.bumpCounters([{ name: 'burst', expiresAt }], now));
    const [first, clash] = await Promise.allSettled([store.createAccount(account('acc_burst_1')), store.createAccount(account('acc_burst_2'))]);
    const counts = (await Promise.all(bumps)).map(([count]) => count ?? 0);
    expect(counts.sort((a, b) => a - b)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    expect(first.status).toBe('fulfilled');
    expect(clash).toMatchObject({ status: 'rejected', reason: { name: 'AccountNameTaken' } });
    expect((await store.listAccounts()).map((a) => a.id)).toEqual(['acc_burst_1']);
    expect((await store.bumpCounters([{ name: 'burst', expiresAt }], now))[0]).toBe(101);
    await new Promise((resolve) => setImmediate(resolve));
    expect(written.size).toBeGreaterThan(0);
    expect(written.size).toBeLessThan(10);
  } finally {
    watcher.close();
  }
});

describe('the lock file that orders writers', () => {
  const lockFile = () => `${file}.lock`;
  const holdLock = (pid: number) => {
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(lockFile(), String(pid));
  };
  const pidOfFinishedProcess = () => {
    const { pid, status } = spawnSync(process.execPath, ['-e', '']);
    expect(status).toBe(0);
    return pid;
  };

  test('a lock left by a process that died is taken over: the write goes through and the lock is gone after', async () => {
    holdLock(pidOfFinishedProcess());
    const { record } = await issueKey(new FileKeyStore(file), { name: 'after-crash' });
    expect((await new FileKeyStore(file).list()).map((key) => key.id)).toEqual([record.id]);
    expect(existsSync(lockFile())).toBe(false);
  });

  test('a lock held by a live process is waited for, and the write goes through when it is released', async () => {
    holdLock(process.pid);
    let settled = false;
    const write = issueKey(new FileKeyStore(file), { name: 'patient' }).finally(() => (settled = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(settled).toBe(false);
    rmSync(lockFile());
    const { record } = await write;
    expect((await new FileKeyStore(file).list()).map((key) => key.id)).toEqual([record.id]);
  });

  test('two waiters saw the same dead holder: the one that takes over second leaves the first one\'s new lock alone', async () => {
    const dead = `${pidOfFinishedProcess()} 0123456789ab`;
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(lockFile(), dead);
    // Waiter A removes the stale lock and takes the lock; waiter B, which read the same stale lock
    // just before, now removes what it saw.
    rmSync(lockFile());
    writeFileSync(lockFile(), `${process.pid} a-token`);
    await removeStaleLock(lockFile(), dead);
    expect(readFileSync(lockFile(), 'utf8')).toBe(`${process.pid} a-token`);
    expect(readdirSync(path.dirname(file)).filter((name) => name.endsWith('.stale'))).toEqual([]);

    writeFileSync(lockFile(), dead); // and when what B saw is still there, it goes
    await removeStaleLock(lockFile(), dead);
    expect(existsSync(lockFile())).toBe(false);
  });

  test('a lock a live process never releases: the write gives up after 10 s with an error that says what to do, and changes nothing', async () => {
    const { record } = await issueKey(new FileKeyStore(file), { name: 'kept' });
    holdLock(process.pid);
    await expect(new FileKeyStore(file).revoke(record.id, new Date())).rejects.toThrow(/key store is locked by another process .*remove the file if no chatgate process holds it/);
    rmSync(lockFile());
    expect((await new FileKeyStore(file).get(record.id))?.revokedAt).toBeNull();
  }, 20_000);
});

describe('a key file edited by hand into something the gateway cannot use', () => {
  const editFirstRecord = (edit: (record: Record<string, unknown>) => void) => {
    const contents = JSON.parse(readFileSync(file, 'utf8')) as { keys: Array<Record<string, unknown>> };
    edit(contents.keys[0]!);
    writeFileSync(file, JSON.stringify(contents));
  };

  test.each([
    ['models as a string, not a list', (r: Record<string, unknown>) => (r.models = 'mock/*'), /keys\[0\]\.models: /],
    ['no models at all', (r: Record<string, unknown>) => delete r.models, /keys\[0\]\.models: /],
    ['an expiry that is not a date', (r: Record<string, unknown>) => (r.expiresAt = 'next tuesday'), /keys\[0\]\.expiresAt: not a date/],
    ['a digest that is not one', (r: Record<string, unknown>) => (r.digest = 'abc'), /keys\[0\]\.digest: not a SHA-256 digest in hex/],
    ['a negative limit', (r: Record<string, unknown>) => (r.rateLimit = { requestsPerMinute: -1 }), /keys\[0\]\.rateLimit\.requestsPerMinute: /],
    ['a fractional count', (r: Record<string, unknown>) => (r.usage = { requests: 1.5 }), /keys\[0\]\.usage\.requests: not a whole number/],
  ])('%s: reads (and readiness) fail, naming the record and field, quoting no value', async (_name, edit, message) => {
    const store = new FileKeyStore(file);
    const { record } = await issueKey(store, { name: 'edited', models: ['mock/*'] });
    editFirstRecord(edit);
    await expect(store.ping()).rejects.toThrow(message);
    const failure = await store.findByDigest(record.digest).then(
      () => 'found',
      (err: Error) => err.message,
    );
    expect(failure).toMatch(/holds a record the gateway cannot use: keys\[0\]/);
    expect(failure).not.toContain(record.digest);
    expect(failure).not.toContain('next tuesday');
  });

  test('fields a file written before they existed lacks get their neutral values; unknown fields are kept', async () => {
    const store = new FileKeyStore(file);
    const { record } = await issueKey(store, { name: 'old' });
    editFirstRecord((r) => {
      delete r.lastUsedAt;
      delete r.rateLimit;
      delete r.usage;
      r.addedByANewerVersion = { kept: true };
    });
    const read = await new FileKeyStore(file).get(record.id);
    expect(read).toMatchObject({ lastUsedAt: null, rateLimit: { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null }, usage: { requests: 0, promptTokens: 0, completionTokens: 0 } });
    editFirstRecord((r) => (r.usage = { requests: 1, promptTokens: 2, completionTokens: 3, cachedTokens: 4 }));
    await new FileKeyStore(file).revoke(record.id, new Date('2030-01-01T00:00:00Z'));
    const written = JSON.parse(readFileSync(file, 'utf8')).keys[0];
    expect(written.addedByANewerVersion).toEqual({ kept: true });
    expect(written.usage).toEqual({ requests: 1, promptTokens: 2, completionTokens: 3, cachedTokens: 4 });
  });

  test('whatever the CLI and the admin API write reads back: a limit of 1e20 is a whole number', async () => {
    const store = new FileKeyStore(file);
    const { record } = await issueKey(store, { name: 'huge' });
    await store.update(record.id, { rateLimit: { tokensPerMinute: 1e20 } });
    expect((await new FileKeyStore(file).get(record.id))?.rateLimit.tokensPerMinute).toBe(1e20);
  });

  test('a file that is not JSON is refused without quoting any of it (it may hold part of a digest)', async () => {
    const store = new FileKeyStore(file);
    const { record } = await issueKey(store, { name: 'cut' });
    const text = readFileSync(file, 'utf8');
    writeFileSync(file, text.replace(`"${record.digest}"`, record.digest)); // the digest unquoted: a syntax error at it
    const failure = await store.ping().then(
      () => 'read',
      (err: Error) => err.message,
    );
    expect(failure).toMatch(/is not valid JSON$/);
    expect(failure).not.toContain(record.digest.slice(0, 8));
  });
});
