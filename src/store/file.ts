/**
 * The embedded key store: one JSON file of digests (mode 0600), replaced atomically on every write.
 * The gateway and the `chatgate keys` CLI share the file; a reader re-reads it when its size or
 * modification time changes. Changes made through this instance are announced at once, changes made
 * by another process within about a second (onChange).
 */
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { promises as fs, unwatchFile, watchFile } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import type { KeyChanges, KeyRecord, KeyStore, KeyUse } from './types';
import { definedFields } from '../common/defined-fields';
import { StoreUnreadable } from './guarded';

/** How often the file's stamp is polled for changes made by other processes. */
const WATCH_INTERVAL_MS = 1000;

interface FileContents {
  version: 1;
  keys: KeyRecord[];
}

interface Snapshot {
  stamp: string;
  byDigest: Map<string, KeyRecord>;
  keys: KeyRecord[];
}

export class FileKeyStore implements KeyStore {
  private snapshot: Snapshot | undefined;
  private readonly changes = new EventEmitter();
  /** Writes one at a time, each on the latest contents. */
  private writing: Promise<unknown> = Promise.resolve();
  private watching = false;

  constructor(readonly file: string) {}

  async findByDigest(digest: string): Promise<KeyRecord | undefined> {
    return (await this.current()).byDigest.get(digest);
  }

  async get(id: string): Promise<KeyRecord | undefined> {
    return (await this.current()).keys.find((k) => k.id === id);
  }

  async list(): Promise<KeyRecord[]> {
    return [...(await this.current()).keys];
  }

  async insert(record: KeyRecord): Promise<void> {
    await this.modify((keys) => {
      if (keys.some((k) => k.id === record.id || k.digest === record.digest)) {
        throw new Error(`key store already holds a key with id ${record.id}`);
      }
      return { keys: [...keys, record], changed: [] };
    });
  }

  update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    const { rateLimit, ...fields } = changes;
    return this.change(id, (k) => ({ ...k, ...definedFields(fields), rateLimit: { ...k.rateLimit, ...definedFields(rateLimit) } }));
  }

  revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    return this.change(id, (k) => (k.revokedAt ? k : { ...k, revokedAt: at.toISOString() }));
  }

  rotate(id: string, digest: string, prefix: string): Promise<KeyRecord | undefined> {
    return this.change(id, (k) => ({ ...k, digest, prefix }));
  }

  async recordUse(uses: ReadonlyMap<string, KeyUse>): Promise<void> {
    if (uses.size === 0) return;
    await this.modify((keys) => ({
      keys: keys.map((k) => {
        const use = uses.get(k.id);
        if (!use) return k;
        const at = use.at.toISOString();
        return {
          ...k,
          lastUsedAt: !k.lastUsedAt || at > k.lastUsedAt ? at : k.lastUsedAt,
          usage: {
            requests: k.usage.requests + use.requests,
            promptTokens: k.usage.promptTokens + use.promptTokens,
            completionTokens: k.usage.completionTokens + use.completionTokens,
          },
        };
      }),
      changed: [],
    }));
  }

  /**
   * Changes this instance makes are announced at once; changes another process makes (the CLI, a
   * second gateway on the same file) are seen by polling the file's stamp every WATCH_INTERVAL_MS, and
   * announced with the digests of the records that differ: a key revoked with `chatgate keys revoke`
   * is refused by a running gateway within about a second.
   */
  onChange(listener: (digests: string[] | undefined) => void): void {
    this.changes.on('change', listener);
    if (this.watching) return;
    this.watching = true;
    let seen: Map<string, string> | undefined;
    const look = async () => {
      const snapshot = await this.current().catch(() => undefined);
      if (!snapshot) return;
      const now = new Map(snapshot.keys.map((k) => [k.digest, JSON.stringify(k)]));
      if (seen) {
        const changed = [...new Set([...now.keys(), ...seen.keys()])].filter((digest) => now.get(digest) !== seen!.get(digest));
        if (changed.length > 0) this.changes.emit('change', changed);
      }
      seen = now;
    };
    void look();
    watchFile(this.file, { interval: WATCH_INTERVAL_MS, persistent: false }, () => void look());
  }

  async ping(): Promise<void> {
    await this.current();
  }

  async close(): Promise<void> {
    if (this.watching) unwatchFile(this.file);
    await this.writing.catch(() => undefined);
    this.snapshot = undefined;
    this.changes.removeAllListeners();
  }

  private async change(id: string, apply: (record: KeyRecord) => KeyRecord): Promise<KeyRecord | undefined> {
    let updated: KeyRecord | undefined;
    await this.modify((keys) => {
      const existing = keys.find((k) => k.id === id);
      if (!existing) return { keys, changed: [] };
      updated = apply(existing);
      return { keys: keys.map((k) => (k.id === id ? updated! : k)), changed: [existing.digest] };
    });
    return updated;
  }

  private modify(apply: (keys: KeyRecord[]) => { keys: KeyRecord[]; changed: string[] }): Promise<void> {
    const run = this.writing.then(() =>
      // The lock file orders this read-change-replace against other instances and processes (the CLI,
      // the admin API, usage flushes), so no writer replaces the file with contents it read too early.
      withLockFile(`${this.file}.lock`, async () => {
        this.snapshot = undefined;
        const { keys, changed } = apply((await this.current()).keys);
        await this.write(keys);
        if (changed.length > 0) this.changes.emit('change', changed);
      }),
    );
    this.writing = run.catch(() => undefined);
    return run;
  }

  private async current(): Promise<Snapshot> {
    try {
      const stamp = await this.stamp();
      if (this.snapshot?.stamp === stamp) return this.snapshot;
      const keys = stamp === 'absent' ? [] : parseContents(await fs.readFile(this.file, 'utf8'), this.file);
      this.snapshot = { stamp, keys, byDigest: new Map(keys.map((k) => [k.digest, k])) };
      return this.snapshot;
    } catch (err) {
      // Unreadable, or not a key file: nothing can be looked up until it is mended.
      throw new StoreUnreadable((err as Error).message, { cause: err });
    }
  }

  private async stamp(): Promise<string> {
    try {
      const stat = await fs.stat(this.file, { bigint: true });
      return `${stat.size}:${stat.mtimeNs}:${stat.ino}`;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
      throw err;
    }
  }

  private async write(keys: KeyRecord[]): Promise<void> {
    await fs.mkdir(path.dirname(this.file), { recursive: true, mode: 0o700 });
    const contents: FileContents = { version: 1, keys };
    const temporary = `${this.file}.${randomBytes(6).toString('hex')}.tmp`;
    await fs.writeFile(temporary, JSON.stringify(contents, null, 2) + '\n', { mode: 0o600 });
    await fs.rename(temporary, this.file);
    this.snapshot = undefined;
  }
}

const LOCK_RETRY_MS = 5;
const LOCK_WAIT_MS = 10_000;

/**
 * Runs `critical` while holding `lockFile` (created exclusively, naming our pid and a token of this
 * hold); a lock left by a dead process is taken over.
 */
async function withLockFile<T>(lockFile: string, critical: () => Promise<T>): Promise<T> {
  await fs.mkdir(path.dirname(lockFile), { recursive: true, mode: 0o700 });
  const giveUpAt = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      await fs.writeFile(lockFile, `${process.pid} ${randomBytes(6).toString('hex')}`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const stale = await staleLock(lockFile);
      if (stale !== undefined) {
        await removeStaleLock(lockFile, stale);
        continue;
      }
      if (Date.now() > giveUpAt) throw new Error(`key store is locked by another process (${lockFile}); remove the file if no chatgate process holds it`);
      await new Promise((resolve) => setTimeout(resolve, LOCK_RETRY_MS));
    }
  }
  try {
    return await critical();
  } finally {
    await fs.rm(lockFile, { force: true });
  }
}

/** The lock's contents when the process it names is gone; undefined while it lives (or the file is being written, or gone). */
async function staleLock(lockFile: string): Promise<string | undefined> {
  const contents = await fs.readFile(lockFile, 'utf8').catch(() => '');
  const pid = Number(contents.split(' ')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    process.kill(pid, 0);
    return undefined;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH' ? contents : undefined;
  }
}

/**
 * Removes the stale lock seen with these contents, and no other: two waiters may both see the dead
 * holder, and the first to take over writes a lock of its own, which the second must not delete. So
 * the file is moved aside under a name of our own and read: a live lock moved by mistake is put back
 * (link, which fails only if yet another lock appeared meanwhile).
 */
export async function removeStaleLock(lockFile: string, seen: string): Promise<void> {
  const aside = `${lockFile}.${randomBytes(6).toString('hex')}.stale`;
  try {
    await fs.rename(lockFile, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // taken away already
    throw err;
  }
  if ((await fs.readFile(aside, 'utf8')) !== seen) await fs.link(aside, lockFile).catch(() => undefined);
  await fs.rm(aside, { force: true });
}

/**
 * The file is written by this code, but people edit it by hand too: a record the request path could
 * not use (models not a list, a date that does not parse) refuses the whole file, naming the record
 * and field, as a file that is not JSON does, rather than failing requests one by one. Values are
 * never quoted (a digest is a secret's fingerprint). Fields a newer version may add are kept. The
 * rules are no stricter than what the CLI and the admin API write (a limit of 1e20 is a whole number).
 */
const timestamp = z.string().refine((value) => !Number.isNaN(Date.parse(value)), 'not a date');
const wholeNumber = z.number().min(0).refine(Number.isInteger, 'not a whole number');
const ownLimit = wholeNumber.nullable().default(null);
const count = wholeNumber.default(0);
const fileRecord = z.looseObject({
  id: z.string().min(1),
  name: z.string(),
  digest: z.string().regex(/^[0-9a-f]{64}$/, 'not a SHA-256 digest in hex'),
  prefix: z.string(),
  createdAt: timestamp,
  revokedAt: timestamp.nullable(),
  expiresAt: timestamp.nullable(),
  models: z.array(z.string()),
  // Files written before a field existed get its neutral value.
  lastUsedAt: timestamp.nullable().default(null),
  rateLimit: z.looseObject({ requestsPerMinute: ownLimit, tokensPerMinute: ownLimit, maxConcurrent: ownLimit }).prefault({}),
  usage: z.looseObject({ requests: count, promptTokens: count, completionTokens: count }).prefault({}),
}) satisfies z.ZodType<KeyRecord>;
const keyFile = z.object({ version: z.literal(1), keys: z.array(z.unknown()) });

function parseContents(text: string, file: string): KeyRecord[] {
  const shape = keyFile.safeParse(parseJson(text, file));
  if (!shape.success) throw new Error(`${file} is not a chatgate key file (expected {"version":1,"keys":[...]})`);
  const records = z.array(fileRecord).safeParse(shape.data.keys);
  if (records.success) return records.data;
  const issue = records.error.issues[0]!;
  const at = issue.path.map((part) => (typeof part === 'number' ? `[${part}]` : `.${String(part)}`)).join('');
  throw new Error(`${file} holds a key record the gateway cannot use: keys${at}: ${issue.message}`);
}

/** JSON.parse's own message quotes the text around the error, which may be part of a digest. */
function parseJson(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${file} is not valid JSON`);
  }
}
