/**
 * A replica that starts while its PostgreSQL is away waits for it instead of exiting: under
 * Kubernetes an exit becomes CrashLoopBackOff, whose back-off grows to 5 minutes, so replicas stayed
 * down for minutes after the database came back. The start's store work (open and migrate, the
 * emptiness check, the first owner) is tried again with a back-off of 200 ms doubling to 3 s, logged
 * once when the wait begins and once when it ends. Meanwhile, on a process that owns the admin
 * listener, a stand-in answers there: `/healthz` 200 (the process is alive: no restart) and
 * `/readyz` 503 (no traffic yet); it closes the moment the store answers, and the real listener
 * opens on the same address. `store.startupTimeoutMs` makes the start give up (exit 1) after that
 * long, for those who prefer an exit.
 *
 * Only a store on the network waits (PostgreSQL): SQLite's and the file store's open errors are
 * about a local file (its path, its permissions, not a database) and do not mend by waiting.
 */
import http from 'node:http';
import type { Config } from '../config';
import { GatewayError } from '../errors';
import { KeyStoreOpenError } from '../store/open';
import type { Logger } from '../telemetry/log';

/** Errors that say the database could not be reached, or is starting or stopping: worth waiting for. */
const AWAY_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'EPIPE', '57P01', '57P02', '57P03']);
const AWAY_MESSAGES = /timeout expired|Connection terminated|connection timeout|the database system is (starting up|shutting down)/i;

/**
 * The store could not be reached (not: it answered, with an error about the call). A wrong password,
 * a database that does not exist or a migration that fails is no outage: the start fails at once
 * with it, rather than waiting while /healthz says all is well.
 */
function storeAway(err: unknown): boolean {
  if (err instanceof GatewayError) return err.code === 'key_store_unavailable';
  if (!(err instanceof KeyStoreOpenError)) return false;
  for (let cause: unknown = err.cause; cause; cause = (cause as { cause?: unknown }).cause) {
    const { code, message } = cause as { code?: unknown; message?: unknown };
    if (typeof code === 'string' && AWAY_CODES.has(code)) return true;
    if (typeof message === 'string' && AWAY_MESSAGES.test(message)) return true;
    if (cause instanceof AggregateError && cause.errors.some((inner) => AWAY_CODES.has((inner as { code?: string }).code ?? ''))) return true;
  }
  return false;
}

const FIRST_RETRY_MS = 200;
const LONGEST_RETRY_MS = 3_000;

export class StoreWait {
  private waitingSince: number | undefined;
  private standIn: http.Server | undefined;
  private standInOpening: Promise<void> | undefined;

  constructor(
    private readonly config: Pick<Config, 'keyStore' | 'store' | 'admin'>,
    private readonly log: Logger,
    /** Whether this process owns the admin listener (the single process or the primary). */
    private readonly ownsAdmin: boolean,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** `work` until it succeeds, waiting between tries while the store is away. */
  async until<T>(what: string, work: () => Promise<T>): Promise<T> {
    let delay = FIRST_RETRY_MS;
    for (;;) {
      try {
        return await work();
      } catch (err) {
        if (this.config.keyStore.type !== 'postgres' || !storeAway(err)) throw err;
        this.waitingSince ??= this.now();
        const started = this.waitingSince;
        if (this.standInOpening === undefined) {
          this.log.warn({ err: (err as Error).message, while: what, startupTimeoutMs: this.config.store.startupTimeoutMs }, 'key store unreachable at start: waiting for it (/healthz 200, /readyz 503 meanwhile)');
          this.standInOpening = this.ownsAdmin ? this.openStandIn() : Promise.resolve();
          await this.standInOpening;
        }
        const limit = this.config.store.startupTimeoutMs;
        if (limit !== null && this.now() - started + delay > limit) {
          await this.done();
          throw err;
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, LONGEST_RETRY_MS);
      }
    }
  }

  /** The store answered (or the start gave up): the stand-in closes, so that the admin listener can open. */
  async done(): Promise<void> {
    if (this.waitingSince !== undefined && this.standInOpening !== undefined) {
      this.log.info({ waitedMs: Math.round(this.now() - this.waitingSince) }, 'key store answers: starting');
      this.waitingSince = undefined;
    }
    await this.standInOpening;
    const server = this.standIn;
    this.standIn = undefined;
    if (server) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections(); // a probe holding a connection open must not hold the start
      await closed;
    }
  }

  private async openStandIn(): Promise<void> {
    const server = http.createServer((req, res) => {
      const path = (req.url ?? '').split('?')[0];
      const [status, body] = path === '/healthz' ? [200, { status: 'ok' }] : path === '/readyz' ? [503, { status: 'not_ready', checks: { keyStore: 'waiting for the key store to answer at start' } }] : [503, { status: 'starting' }];
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', connection: 'close' });
      res.end(JSON.stringify(body));
    });
    const { host, port } = this.config.admin;
    await new Promise<void>((resolve) => {
      server.once('error', (err) => {
        // The address is taken (or refused): the start goes on waiting without a stand-in.
        this.log.warn({ err: err.message }, 'the stand-in for the admin listener could not open while the key store is awaited');
        resolve();
      });
      server.listen(port, host, () => {
        this.standIn = server;
        resolve();
      });
    });
  }
}
