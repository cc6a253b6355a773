/**
 * What the stages learn about a request, in the order they learn it. Each stage reads what earlier
 * stages wrote and adds its own result; nothing flows backwards.
 */
import type { Response } from 'express';
import type { KeyRecord } from './auth/store/types';
import type { ChatRequest } from './validate';
import type { UpstreamTarget } from './upstream/providers';
import { NO_PROVIDER } from './metrics';
import type { Limits } from './ratelimit/bucket';
import type { TraceContext } from './trace';
import type { TokenUsage } from './usage';

export interface RequestContext {
  /** performance.now() when the request arrived. */
  readonly arrivedAt: number;
  requestId: string;
  /** Metric label: the configured provider once routing chose one. */
  provider: string;
  key?: KeyRecord;
  /** The request body as text (valid UTF-8 JSON), until the route stage turns it into the worker's bytes. */
  body?: string;
  chat?: ChatRequest;
  target?: UpstreamTarget;
  /** performance.now() when the request was first sent to a worker. */
  dispatchedAt?: number;
  /** The key's effective limits, when it has any (the answer's tokens are charged to them). */
  limits?: Limits;
  trace?: TraceContext;
  /** For the access log: the worker that answered, when its answer started, what it used, what failed. */
  worker?: string;
  firstByteAt?: number;
  usage?: TokenUsage;
  errorCode?: string;
}

export function createContext(res: Response, arrivedAt: number): RequestContext {
  const context: RequestContext = { arrivedAt, requestId: '', provider: NO_PROVIDER };
  res.locals.chatgate = context;
  return context;
}

export function contextOf(res: Response): RequestContext {
  return required(findContext(res), 'context');
}

/** For code that also runs outside the request path (the error handler on the admin listener). */
export function findContext(res: Response): RequestContext | undefined {
  return res.locals.chatgate as RequestContext | undefined;
}

/** A stage that needs an earlier stage's result and does not find it is wired in the wrong order. */
export function required<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`request context has no ${what}: stage order is wrong`);
  return value;
}
