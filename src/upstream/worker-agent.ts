/**
 * A worker's keep-alive agent.
 *
 * Node's agent keeps the options of a connection's first request for as long as the connection lives
 * (it pools the connection and opens its replacement by them): the request's headers, and a key for
 * each TLS option http-proxy copies, most of them undefined. With one connection per open stream that
 * was 1.6 KiB a stream, in a dictionary. `createConnection`, the agent's documented hook, gets that
 * very object, so the fields no connection needs are dropped there.
 *
 * Idle pooled connections are retired by a sweep, not by the agent's `timeout` option. With that
 * option every request clears the connection's timer and sets a new one (a timer, a bound function
 * and a listener each time), and the timer is refreshed on every read and write: 2,000-3,700 more
 * instructions per request for a client on loopback under callgrind, against the gateway's 670,000 or
 * so. Here a connection is stamped with its deadline when it goes back to the pool (`keepSocketAlive`,
 * the agent's documented hook), and a sweep, running only while some connection is idle, closes those
 * past it.
 */
import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';

export interface WorkerAgentOptions extends https.AgentOptions {
  /** An idle pooled connection is closed after this long, or sooner if the worker's Keep-Alive says so. */
  idleTimeoutMs: number;
}

/**
 * How often idle connections are checked. A connection is closed up to this much before its deadline
 * and, when the sweep runs late, after it by as much as the sweep is late.
 */
export const IDLE_SWEEP_MS = 250;
/**
 * How long before a worker's announced keep-alive timeout (`Keep-Alive: timeout=N`) its connection
 * is retired, so that no request is sent on it as the worker closes it (Node's own margin).
 */
const KEEP_ALIVE_HINT_MARGIN_MS = 1000;
const KEEP_ALIVE_TIMEOUT = /^timeout=(\d+)/;

const IDLE_DEADLINE = Symbol('chatgate.idleDeadline');
type PooledSocket = Socket & { [IDLE_DEADLINE]?: number };
/** Node's own link from a connection to the request on it, which Node's `keepSocketAlive` reads too. */
type InUse = Socket & { _httpMessage?: { res?: http.IncomingMessage | null } | null };

export function workerAgent(protocol: string, { idleTimeoutMs, ...options }: WorkerAgentOptions): http.Agent {
  const agent = protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
  const createConnection = agent.createConnection;
  agent.createConnection = function connectWithoutRequestFields(connection, callback) {
    dropRequestFields(connection as Record<string, unknown>);
    return createConnection.call(this, connection, callback);
  };

  const allowance = idleAllowance(idleTimeoutMs);
  let sweep: NodeJS.Timeout | undefined;
  /** When the sweep last ran: a connection's deadline counts from it, so it may come early, never late. */
  let sweptAt = 0;
  const retireIdleConnections = () => {
    sweptAt = performance.now();
    if (closePastDeadline(agent, sweptAt) > 0) return;
    clearInterval(sweep);
    sweep = undefined;
  };
  // Node's returns whether the connection may be kept (its types say void).
  const keepSocketAlive = agent.keepSocketAlive as (this: http.Agent, socket: Socket) => boolean;
  agent.keepSocketAlive = function keepUntilIdleDeadline(socket: Socket): boolean {
    const idleMs = allowance(socket);
    if (idleMs <= 0 || !keepSocketAlive.call(this, socket)) return false;
    if (sweep === undefined) {
      sweptAt = performance.now();
      sweep = setInterval(retireIdleConnections, IDLE_SWEEP_MS).unref();
    }
    (socket as PooledSocket)[IDLE_DEADLINE] = sweptAt + idleMs;
    return true;
  };
  return agent;
}

/** An undefined option and a missing one mean the same to net, tls and the agent's pooling key. */
function dropRequestFields(options: Record<string, unknown>): void {
  delete options.headers;
  for (const name in options) if (options[name] === undefined) delete options[name];
}

/**
 * How long a connection whose answer just ended may stay idle: `idleTimeoutMs`, or less if the
 * worker announced a shorter keep-alive timeout; 0 or less when it must not be kept. A worker sends
 * the same announcement with every answer, so the last one's reading is kept.
 */
function idleAllowance(idleTimeoutMs: number): (socket: Socket) => number {
  let lastHint: string | undefined;
  let lastAllowance = idleTimeoutMs;
  return (socket) => {
    const hint = (socket as InUse)._httpMessage?.res?.headers['keep-alive'];
    if (typeof hint !== 'string') return idleTimeoutMs;
    if (hint !== lastHint) {
      const seconds = KEEP_ALIVE_TIMEOUT.exec(hint)?.[1];
      lastAllowance = seconds === undefined ? idleTimeoutMs : Math.min(idleTimeoutMs, Number(seconds) * 1000 - KEEP_ALIVE_HINT_MARGIN_MS);
      lastHint = hint;
    }
    return lastAllowance;
  };
}

/** Closes the idle connections past their deadline; returns how many idle ones are left. */
function closePastDeadline(agent: http.Agent, now: number): number {
  let left = 0;
  for (const sockets of Object.values(agent.freeSockets)) {
    for (const socket of sockets ?? []) {
      const deadline = (socket as PooledSocket)[IDLE_DEADLINE];
      if (socket.destroyed) continue;
      if (deadline !== undefined && deadline <= now) socket.destroy();
      else left++;
    }
  }
  return left;
}
