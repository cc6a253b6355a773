/**
 * The proxy's dealings with a worker connection that need nothing of an attempt: how the body is
 * sent, what a failed connection leaves behind, what an answer says of the worker, a failure's causes.
 */
import type { Agent, ClientRequest } from 'node:http';
import type { Readable } from 'node:stream';
import type { UpstreamTarget } from '../../context';
import type { GatewayError } from '../../errors';
import type { Outcome } from '../pool';

/**
 * http-proxy sends the body with `options.buffer.pipe(upstreamRequest)`. The body is already whole in
 * memory, so it is written in one call, without a Readable per request (test/upstream/proxy.test.ts
 * checks the worker receives it intact). That call ends the request before it has a socket, which
 * is what lets `proxyReq` hold its bytes to the end of the iteration (write-batching.ts). It is read
 * from the target when sent, not captured here: http-proxy's listeners keep these options as long as
 * the answer lasts, and the body is released once the worker answers
 * (test/upstream/stream-memory.test.ts).
 */
export function wholeBody(target: UpstreamTarget): Readable {
  return { pipe: (upstreamRequest: ClientRequest) => upstreamRequest.end(target.body) } as unknown as Readable;
}

/**
 * After a connection to a worker failed, its other pooled connections are suspect (the worker may
 * have died): close them, so the next requests open fresh ones, whose failure is safe to retry.
 */
export function dropIdleConnections(agent: Agent): void {
  for (const sockets of Object.values(agent.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
}

/**
 * Only answers that speak of the worker's state count against it. A plain 500 can be caused by the
 * request itself, and any key holder could then eject healthy workers with a few crafted requests.
 */
export function outcomeOfAnswer(status: number): Outcome {
  if (status === 502 || status === 503 || status === 504) return 'failure';
  return status >= 500 ? 'neutral' : 'success';
}


export function withCause(failure: GatewayError, ...causes: unknown[]): GatewayError {
  failure.cause = causes.length === 1 ? causes[0] : causes;
  return failure;
}
