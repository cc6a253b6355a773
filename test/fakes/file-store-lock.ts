/** The file store's lock: one writer at a time across processes, a lock left by a dead process taken over. */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { sleep } from '../helpers/time';

const LOCK_RETRY_MS = 5;
const LOCK_WAIT_MS = 10_000;

/**
 * Runs `critical` while holding `lockFile` (created exclusively, naming our pid and a token of this
 * hold); a lock left by a dead process is taken over.
 */
export async function withLockFile<T>(lockFile: string, critical: () => Promise<T>): Promise<T> {
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
      await sleep(LOCK_RETRY_MS);
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


/** The file's size, time and inode: a change of any means another process wrote it ('absent': none yet). */
export async function fileStamp(file: string): Promise<string> {
  try {
    const stat = await fs.stat(file, { bigint: true });
    return `${stat.size}:${stat.mtimeNs}:${stat.ino}`;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
    throw err;
  }
}

/** Replaces the file at once (a new file renamed over it, mode 0600): a reader sees the old or the new. */
export async function replaceFile(file: string, contents: unknown): Promise<void> {
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const temporary = `${file}.${randomBytes(6).toString('hex')}.tmp`;
  await fs.writeFile(temporary, `${JSON.stringify(contents, null, 2)}\n`, { mode: 0o600 });
  await fs.rename(temporary, file);
}
