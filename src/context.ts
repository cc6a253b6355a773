/**
 * The request context: what the stages learn about a request, in the order they learn it. Each stage
 * reads what earlier stages wrote and adds its own result; nothing flows backwards.
 *
 * This file declares every shape the context holds and imports no stage: a stage that reads a field
 * depends on this file only, never on the stage that wrote it (validation knows nothing of keys, the
 * proxy nothing of validation). A stage's own types satisfy these shapes structurally.
 */
import type { Response } from 'express';
import type { Endpoint } from './common/endpoints';

/** The provider label of a request that failed before a configured provider was chosen. */
export const NO_PROVIDER = 'none';

/** The W3C trace a request belongs to (the trace stage), and the gateway's span in it. */
export interface TraceContext {
  traceId: string;
  /** The gateway's span: the parent of the worker's. */
  spanId: string;
  /** The client's span, when it sent a valid traceparent. */
  parentSpanId: string | undefined;
  flags: string;
  tracestate: string | undefined;
}

/** The key a request was admitted with (the authenticate stage), as later stages may use it: never its digest. */
export interface CallerKey {
  readonly id: string;
  readonly name: string;
  /** The account that owns it: its usage and quota are counted there too. */
  readonly accountId: string;
  /** The key's own quota of tokens per UTC day and month; null: none of its own. */
  readonly quota: Readonly<{ tokensPerDay: number | null; tokensPerMonth: number | null }>;
  /** The key's own budget per UTC day and month, in the price table's currency; null: none of its own. */
  readonly budget: Readonly<{ perDay: number | null; perMonth: number | null }>;
  /** Globs over `<provider>/<model_name>` (and aliases); empty means every model. */
  readonly models: readonly string[];
  /** The endpoints the key may call; empty means every one. */
  readonly endpoints: readonly string[];
  /** Set when a client token stands in for the key: what it narrows (its endpoints are in `endpoints`). */
  readonly clientToken?: Readonly<{ models?: readonly string[]; maxTokens?: number; endUser?: string; expiresAt: number }>;
  /** The key's own limits; null: the configured default; 0: no limit for this key. */
  readonly rateLimit: Readonly<{ requestsPerMinute: number | null; tokensPerMinute: number | null; maxConcurrent: number | null }>;
}

/** The validated request (the body stage): what the gateway acts on. Every other field passes through. */
export interface ModelRequest {
  endpoint: Endpoint;
  /** `model` as the client sent it: `<provider>/<model_name>`, or an alias. */
  model: string;
  /** Split at the first slash, when `model` has one (an alias may not). */
  provider: string | undefined;
  /** The worker's model name: everything after the first slash (it may hold more slashes). */
  modelName: string | undefined;
  stream: boolean;
  /** The client's `stream_options`, if it sent an object. */
  streamOptions: Record<string, unknown> | undefined;
  /** The most output tokens the request allows (`max_tokens` and its kin); undefined: it sets none; 0: the endpoint has no output. */
  maxOutputTokens: number | undefined;
  /** Each output bound field the request set, and its value (a quota's cap lowers each, never raises one). */
  outputBounds?: Readonly<Record<string, number>>;
  /** How many answers it asks for (`n`, `best_of`, a completions batch's prompts): each may reach the bound. */
  outputs: number;
  /** The end user the client named (`X-Chatgate-End-User`, else `safety_identifier`, else `user`), as it sent it: usage is kept by its digest only. */
  endUser?: string;
}

/** Where the route stage sends the request, and the bytes it goes with (model renamed for the worker). */
export interface UpstreamTarget {
  readonly endpoint: Endpoint;
  /** The configured provider whose pool serves it. */
  readonly provider: string;
  /** The worker's model name. */
  readonly modelName: string;
  /** The alias the client named, when it named one. */
  readonly alias: string | undefined;
  /** Kept for retries until a worker's answer starts, then released: a long stream must not hold its prompt. */
  body: Buffer;
  /** The gateway added stream_options.include_usage: the usage chunk is not the client's. */
  readonly dropUsageChunk: boolean;
  /**
   * The next target (an alias's fallback), for when this one's pool cannot take the request before
   * any byte reached a worker; undefined when there is none.
   */
  readonly fallback: (() => UpstreamTarget) | undefined;
  /** `<provider>/<model_name>` of this target and of the fallbacks after it: every model that may answer (what a budget reserves for). */
  readonly mayAnswer: readonly string[];
}

/** What an answer reported it used (read by the proxy's relay). */
export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  /** Of the prompt tokens, those the worker served from its cache (when it says). */
  cachedTokens?: number;
}

export interface RequestContext {
  /** performance.now() when the request arrived. */
  readonly arrivedAt: number;
  requestId: string;
  /** Metric label: the configured provider once routing chose one. */
  provider: string;
  trace?: TraceContext;
  key?: CallerKey;
  /** The key's effective tokens-per-minute limit, when it has one (the rate limit stage): the answer's tokens are charged to it. */
  tokensPerMinute?: number;
  /** The request body as text (valid UTF-8 JSON), until the route stage turns it into the worker's bytes. */
  body?: string;
  modelRequest?: ModelRequest;
  target?: UpstreamTarget;
  /** performance.now() when the request was first sent to a worker. */
  dispatchedAt?: number;
  /**
   * Set by the proxy stage when the client left and the worker's answer is still read for its usage
   * (upstream/proxy/answer.ts): what must wait for the worker to be free (the key's concurrency slot) goes here,
   * and is called when it is.
   */
  drainEnded?: Array<() => void>;
  /** performance.now() when a worker's connection first took the request (it may have reached the worker): from here a client that leaves still pays. */
  sentAt?: number;
  /** For the access log: the worker that answered, when its answer started, what it used, what failed. */
  worker?: string;
  firstByteAt?: number;
  usage?: TokenUsage;
  errorCode?: string;
  /** What the quota stage reserved: released when the answer's use is charged. */
  quotaReservation?: { release(): void };
  /** What the budget stage reserved (nano-units of the currency): released when the answer's cost is charged. */
  budgetReservation?: { release(): void };
  /** The end user's digest (accounts/end-users.ts), made once a request when its use is counted. */
  endUserDigest?: string;
  /** The output bound the quota stage reserved for a request that set none, or capped to what is left: the route stage writes it into the worker's body. */
  reservedOutputBound?: number;
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
