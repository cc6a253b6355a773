/**
 * The reader of the retired file store's keys.json (src/store/file-schema.ts), which `chatgate store
 * import` and a new SQLite file beside a keys.json use: a file edited by hand into something the
 * gateway cannot use is refused, naming the record and field, quoting no value. The files are written
 * by the file store fake (test/fakes/file-store.ts), as the gateway once wrote them.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { FileKeyStore } from '../fakes/file-store';

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-store-'));
  file = path.join(dir, 'nested', 'keys.json');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

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
