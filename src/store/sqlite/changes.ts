/**
 * How a process learns of key changes others made in the same database file (the CLI, another
 * gateway, a `server.processes` sibling): SQLite tells each connection, at almost no cost, whether
 * anyone else committed since it last asked (`PRAGMA data_version`); when so, the digests logged by
 * the key table's triggers since the last one seen are read and announced. Changes this process
 * makes are read and announced right after they commit. The log is pruned of entries older than
 * KEEP_MS; a reader that fell further behind than that (a process stopped in a debugger) announces
 * `undefined`: anything may have changed.
 */
import type { SqlConnection, SqlStatement } from './driver';

/** How often the database is asked whether another process committed. */
export const POLL_MS = 250;
/** Change log entries older than this are pruned (by whichever process writes keys). */
const KEEP_MS = 10 * 60_000;
const PRUNE_EVERY_MS = 60_000;

export type ChangeListener = (digests: string[] | undefined) => void;

export class ChangeFeed {
  private readonly listeners: ChangeListener[] = [];
  private lastSeq: number;
  private dataVersion: number;
  private timer: NodeJS.Timeout | undefined;
  private prunedAt = 0;
  /** The last poll failed: the next that succeeds announces `undefined`. */
  private failing = false;
  private readonly since: SqlStatement;
  private readonly dataVersionStatement: SqlStatement;
  private readonly pruneStatement: SqlStatement;

  constructor(db: SqlConnection) {
    this.since = db.prepare('select seq, digest from chatgate_key_changes where seq > ? order by seq');
    this.dataVersionStatement = db.prepare('PRAGMA data_version');
    this.pruneStatement = db.prepare('delete from chatgate_key_changes where at < ?');
    // The last sequence number handed out, even if its entry was pruned since.
    this.lastSeq = (db.prepare("select coalesce(max(seq), 0) as seq from sqlite_sequence where name = 'chatgate_key_changes'").get() as { seq: number }).seq;
    this.dataVersion = this.version();
  }

  /** True while polls run and answer: every key change reaches the listeners within about POLL_MS. */
  get live(): boolean {
    return this.timer !== undefined && !this.failing;
  }

  listen(listener: ChangeListener): void {
    this.listeners.push(listener);
    if (this.timer) return;
    this.timer = setInterval(() => this.poll(), POLL_MS);
    this.timer.unref();
  }

  /** Reads what was logged since the last look (after a change of ours, or another process's). */
  read(): void {
    const rows = this.since.all(this.lastSeq) as Array<{ seq: number; digest: string }>;
    if (rows.length === 0) return;
    // Sequence numbers have no gaps (a rolled back insert hands its number out again): a gap is a prune.
    const missed = rows[0]!.seq > this.lastSeq + 1;
    this.lastSeq = rows.at(-1)!.seq;
    this.emit(missed ? undefined : [...new Set(rows.map((row) => row.digest))]);
  }

  /** Drops old log entries; called inside a write transaction of keys, at most once a minute. */
  prune(now: number): void {
    if (now - this.prunedAt < PRUNE_EVERY_MS) return;
    this.prunedAt = now;
    this.pruneStatement.run(new Date(now - KEEP_MS).toISOString());
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.listeners.length = 0;
  }

  private poll(): void {
    try {
      const version = this.version();
      if (this.failing) {
        this.failing = false;
        this.dataVersion = version;
        this.lastSeq = (this.since.all(this.lastSeq) as Array<{ seq: number }>).at(-1)?.seq ?? this.lastSeq;
        this.emit(undefined); // whatever changed while the file could not be read
        return;
      }
      if (version === this.dataVersion) return;
      this.dataVersion = version;
      this.read();
    } catch {
      // The file cannot be read right now (locked for longer than the busy timeout, a full disk): the
      // next poll tries again; meanwhile the feed is not live, and caches fall back to their short TTL.
      this.failing = true;
    }
  }

  private version(): number {
    return (this.dataVersionStatement.get() as { data_version: number }).data_version;
  }

  private emit(digests: string[] | undefined): void {
    for (const listener of this.listeners) listener(digests);
  }
}
