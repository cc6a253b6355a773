/**
 * The PostgreSQL store's change feed: one connection that LISTENs on the key channel, answers a
 * heartbeat, and reconnects by itself; after a reconnect every cached key is suspect (undefined).
 */
import pg from 'pg';
import { CHANNEL } from './postgres-channel';

const RECONNECT_DELAYS_MS = [100, 250, 500, 1000, 2000, 5000];
/** The listening connection is asked to answer this often... */
const HEARTBEAT_MS = 5000;
/** ...and taken for lost when it has not within this. */
const HEARTBEAT_DEADLINE_MS = 5000;

export interface PostgresEvents {
  /** The notification connection failed or came back; for logs. Never given the URL (it may hold a password). */
  listener(state: 'lost' | 'restored', error?: Error): void;
}

export class ChangeFeed {
  private listenerClient: pg.Client | undefined;
  private closed = false;
  private reconnectAttempt = 0;
  private reconnectTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly url: string,
    private readonly events: PostgresEvents,
    private readonly emit: (digests: string[] | undefined) => void,
  ) {}

  /** The LISTEN connection is up and answered its last heartbeat (a silent cut is noticed within HEARTBEAT_MS + HEARTBEAT_DEADLINE_MS). */
  get live(): boolean {
    return this.listenerClient !== undefined && !this.closed;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    await this.listenerClient?.end().catch(() => undefined);
  }

  async listen(): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 5000, keepAlive: true });
    const lost = (error?: Error) => {
      if (this.listenerClient !== client || this.closed) return;
      this.listenerClient = undefined;
      client.end().catch(() => undefined);
      this.events.listener('lost', error);
      this.scheduleReconnect();
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (message) => {
      if (message.channel === CHANNEL && message.payload) this.emit([message.payload]);
    });
    try {
      await client.connect();
      await client.query(`listen ${CHANNEL}`);
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
        this.events.listener('restored');
        // Whatever changed while nobody was listening: every cached key is suspect.
        this.emit(undefined);
      } catch {
        if (!this.closed) this.scheduleReconnect();
      }
    }, delay);
    this.reconnectTimer.unref();
  }
}
