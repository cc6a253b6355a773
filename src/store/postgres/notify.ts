/**
 * The PostgreSQL store's change feed: one connection that LISTENs on the key channel, answers a
 * heartbeat, and reconnects by itself; after a reconnect every cached key is suspect (undefined).
 * While it is down or reconnecting, the key change log (migration 7, written by the same trigger) is
 * read through the pool every POLL_MS: a revocation reaches this replica within a second of the
 * database answering, however long LISTEN takes to come back.
 */
import pg from 'pg';
import { CHANNEL } from './channel';

const RECONNECT_DELAYS_MS = [100, 250, 500, 1000, 2000, 5000];
/** The listening connection is asked to answer this often... */
const HEARTBEAT_MS = 5000;
/** ...and taken for lost when it has not within this. */
const HEARTBEAT_DEADLINE_MS = 5000;
/** The change log is read this often while LISTEN is down. */
export const POLL_MS = 500;
/** Log entries this recent are read again at every poll (see poll()). */
const RECENT_S = 30;
/** Log entries older than this are pruned (by whichever replica's heartbeat comes round), about once a minute. */
const KEEP_MS = 10 * 60_000;
const PRUNE_EVERY_BEATS = 12;

/** A query through the store's pool. */
export type PoolQuery = <R extends pg.QueryResultRow>(sql: string, params: unknown[]) => Promise<{ rows: R[] }>;

export interface PostgresEvents {
  /** The notification connection failed or came back; for logs. Never given the URL (it may hold a password). */
  listener(state: 'lost' | 'restored', error?: Error): void;
}

export class ChangeFeed {
  private listenerClient: pg.Client | undefined;
  private closed = false;
  private reconnectAttempt = 0;
  private reconnectTimer: NodeJS.Timeout | undefined;
  /** The last change log entry known here (read when LISTEN began, then by each poll). */
  private lastSeq: number | undefined;
  private lastSeqAt = 0;
  private pollTimer: NodeJS.Timeout | undefined;
  private polling = false;
  private beats = 0;

  constructor(
    private readonly url: string,
    private readonly events: PostgresEvents,
    private readonly emit: (digests: string[] | undefined) => void,
    private readonly query?: PoolQuery,
  ) {}

  /** The LISTEN connection is up and answered its last heartbeat (a silent cut is noticed within HEARTBEAT_MS + HEARTBEAT_DEADLINE_MS). */
  get live(): boolean {
    return this.listenerClient !== undefined && !this.closed;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    this.stopPolling();
    await this.listenerClient?.end().catch(() => undefined);
  }

  async listen(): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 5000, keepAlive: true });
    const lost = (error?: Error) => {
      if (this.listenerClient !== client || this.closed) return;
      this.listenerClient = undefined;
      client.end().catch(() => undefined);
      this.events.listener('lost', error);
      this.startPolling();
      this.scheduleReconnect();
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (message) => {
      if (message.channel === CHANNEL && message.payload) this.emit([message.payload]);
    });
    try {
      await client.connect();
      // Where a poll starts from, should this connection drop. Read just before LISTEN: a change in
      // between is neither notified nor polled, but every (re)connect announces that anything may
      // have changed (and a first start has nothing cached).
      const { rows } = await client.query<{ seq: string }>('select coalesce(max(seq), 0) as seq from chatgate_key_changes');
      await client.query(`listen ${CHANNEL}`);
      this.lastSeq = Number(rows[0]?.seq ?? 0);
      this.lastSeqAt = Date.now();
    } catch (err) {
      await client.end().catch(() => undefined); // a client connected but not listening would stay open
      throw err;
    }
    if (this.closed) {
      await client.end().catch(() => undefined); // closed while this reconnect was under way
      throw new Error('key store closed');
    }
    this.listenerClient = client;
    this.heartbeat(client, lost);
  }

  /**
   * A connection cut without a word (a dropped route, a frozen server) delivers no notification and
   * no error either: the listening connection is asked to answer every HEARTBEAT_MS, and one that
   * does not within HEARTBEAT_DEADLINE_MS is taken for lost (changeFeedLive goes false; reconnect).
   */
  private heartbeat(client: pg.Client, lost: (error?: Error) => void): void {
    let waiting = false;
    const timer = setInterval(() => {
      if (this.listenerClient !== client || this.closed) return clearInterval(timer);
      if (waiting) return;
      waiting = true;
      if (++this.beats % PRUNE_EVERY_BEATS === 0) {
        client.query(`delete from chatgate_key_changes where at < now() - interval '${KEEP_MS / 1000} seconds'`).catch(() => undefined);
      }
      const deadline = setTimeout(() => lost(new Error(`the change feed did not answer within ${HEARTBEAT_DEADLINE_MS} ms`)), HEARTBEAT_DEADLINE_MS);
      deadline.unref();
      client.query('select 1').then(
        () => {
          waiting = false;
          clearTimeout(deadline);
        },
        (err: Error) => {
          clearTimeout(deadline);
          lost(err);
        },
      );
    }, HEARTBEAT_MS);
    timer.unref();
  }

  private scheduleReconnect(): void {
    const delay = RECONNECT_DELAYS_MS[Math.min(this.reconnectAttempt++, RECONNECT_DELAYS_MS.length - 1)];
    this.reconnectTimer = setTimeout(async () => {
      if (this.closed) return;
      try {
        await this.listen();
        this.reconnectAttempt = 0;
        this.stopPolling();
        this.events.listener('restored');
        // Whatever changed while nobody was listening: every cached key is suspect.
        this.emit(undefined);
      } catch {
        if (!this.closed) this.scheduleReconnect();
      }
    }, delay);
    this.reconnectTimer.unref();
  }

  private startPolling(): void {
    if (!this.query || this.pollTimer || this.closed) return;
    this.pollTimer = setInterval(() => void this.poll(), POLL_MS);
    this.pollTimer.unref();
  }

  private stopPolling(): void {
    clearInterval(this.pollTimer);
    this.pollTimer = undefined;
  }

  /** The key changes logged since the last one known here, announced; nothing while the database does not answer. */
  private async poll(): Promise<void> {
    if (this.polling || this.lastSeq === undefined || !this.query) return;
    this.polling = true;
    try {
      const since = this.lastSeq;
      // Sequence numbers are handed out when a change is made, not when it commits: one that commits
      // after a later one would be skipped by `seq > last` alone. The last RECENT_S seconds are read
      // again at every poll (announcing a digest twice costs one lookup).
      const { rows } = await this.query<{ seq: string; digest: string }>(
        `select seq, digest from chatgate_key_changes where seq > $1 or at > now() - interval '${RECENT_S} seconds' order by seq limit 10000`,
        [since],
      );
      if (Date.now() - this.lastSeqAt > KEEP_MS) {
        // Entries since the last one known may have been pruned: anything may have changed.
        this.emit(undefined);
      } else if (rows.length > 0) {
        this.emit(rows.map((row) => row.digest));
      }
      if (this.lastSeq === since) {
        this.lastSeq = Math.max(since, ...rows.map((row) => Number(row.seq)));
        this.lastSeqAt = Date.now();
      }
    } catch {
      // The database does not answer yet: the next poll asks again.
    } finally {
      this.polling = false;
    }
  }
}
