/**
 * The one error path. Every stage stops a request by throwing a GatewayError from this catalogue;
 * the error handler turns it into the OpenAI error body. Anything that is not a GatewayError is an
 * internal fault: the client gets a generic 500 that carries the request id and nothing internal.
 */
import { withoutKeys } from './common/key-shape';

export type ErrorType =
  | 'invalid_request_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'insufficient_quota'
  | 'api_error';

export interface ErrorBody {
  error: { message: string; type: ErrorType; param: string | null; code: string };
}

export class GatewayError extends Error {
  /**
   * A condition its own part reports once when it begins and once when it ends (a store outage): the
   * error handler does not log it again for every request it refuses.
   */
  reportedElsewhere = false;

  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = 'GatewayError';
  }

  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

function reportedElsewhere(error: GatewayError): GatewayError {
  error.reportedElsewhere = true;
  return error;
}

/** Both schemes are offered so that a client told 401 knows what it may send. */
export const WWW_AUTHENTICATE = 'Bearer realm="chatgate", Basic realm="chatgate", charset="UTF-8"';
const challenge = { 'WWW-Authenticate': WWW_AUTHENTICATE };

const invalid = (status: number, code: string, message: string, param: string | null = null, headers = {}) =>
  new GatewayError(status, 'invalid_request_error', code, message, param, headers);

export const errors = {
  httpsRequired: () =>
    invalid(403, 'https_required', 'This API is served over HTTPS only: send the request to https:// instead.'),
  missingApiKey: () =>
    invalid(
      401,
      'missing_api_key',
      "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' or as HTTP Basic with the key as user name and an empty password.",
      null,
      challenge,
    ),
  invalidAuthorizationHeader: (reason: string) =>
    invalid(401, 'invalid_authorization_header', `Invalid Authorization header: ${reason}.`, null, challenge),
  invalidSignature: () =>
    invalid(401, 'invalid_signature', 'The report is not signed by a key this gateway trusts (Github-Public-Key-Identifier and Github-Public-Key-Signature): nothing was changed.'),
  invalidApiKey: () =>
    invalid(401, 'invalid_api_key', 'Incorrect API key provided, or the key is revoked or expired.', null, challenge),
  modelNotPricedUnderBudget: (model: string) =>
    new GatewayError(403, 'permission_error', 'model_not_priced', `The model '${withoutKeys(model.slice(0, 256))}' has no price in this gateway's price table, and this API key (or its account) has a budget: what it costs could not be counted against it.`, 'model'),
  modelNotPriced: (model: string) =>
    new GatewayError(403, 'permission_error', 'model_not_priced', `The model '${withoutKeys(model.slice(0, 256))}' has no price in this gateway's price table, and models without one are not served here (prices.unpricedModels: refuse).`, 'model'),
  modelNotAllowed: (model: string) =>
    new GatewayError(403, 'permission_error', 'model_not_allowed', `This API key may not use the model '${withoutKeys(model)}'.`, 'model'),
  invalidJson: (reason: string) => invalid(400, 'invalid_json', `The request body is not valid JSON: ${reason}.`),
  invalidBody: (param: string | null, message: string) => invalid(400, 'invalid_body', message, param),
  /** A header the gateway reads (not a credential) holds what it cannot take; `param` names the header. */
  invalidHeader: (header: string, message: string) => invalid(400, 'invalid_header', message, header),
  unsupportedContentEncoding: () =>
    invalid(415, 'unsupported_content_encoding', 'The request body must not be compressed (Content-Encoding: identity).'),
  requestTooLarge: (limitBytes: number) =>
    invalid(413, 'request_too_large', `The request body is larger than the limit of ${limitBytes} bytes.`),
  badRequest: (message: string) => invalid(400, 'invalid_request', message),
  malformedRequest: () => invalid(400, 'malformed_request', 'The request is not valid HTTP/1.1 (its request line, headers or body framing).'),
  headersTooLarge: () => invalid(431, 'request_headers_too_large', 'The request headers are larger, or more, than the server accepts.'),
  requestTimeout: () => invalid(408, 'request_timeout', 'The request was not received in time.'),
  modelNotFound: (model: string) =>
    invalid(404, 'model_not_found', `The model '${withoutKeys(model)}' does not exist: no configured provider or model alias has that name.`, 'model'),
  /** The model exists, but no provider serving it serves this endpoint (providers.<name>.endpoints). */
  modelNotServedHere: (model: string, path: string) =>
    invalid(404, 'model_not_found', `The model '${withoutKeys(model)}' is not served at ${path}: its workers do not serve this endpoint.`, 'model'),
  ipNotAllowed: () => new GatewayError(403, 'permission_error', 'ip_not_allowed', 'This API key may not be used from this address (its allowedIps).', null),
  endpointNotAllowed: (path: string) =>
    new GatewayError(403, 'permission_error', 'endpoint_not_allowed', `This API key may not call ${path}.`, null),
  routeNotFound: (method: string, path: string) => invalid(404, 'not_found', `Unknown request URL: ${method} ${withoutKeys(path)}.`),
  methodNotAllowed: (method: string, allowed: string) =>
    invalid(405, 'method_not_allowed', `Method ${method} is not allowed here; use ${allowed}.`, null, { Allow: allowed }),
  invalidAdminToken: () =>
    invalid(401, 'invalid_admin_token', 'The admin API needs Authorization: Bearer <admin token>.', null, { 'WWW-Authenticate': 'Bearer realm="chatgate-admin"' }),
  tooManyFailedAttempts: (retryAfterMs: number) => {
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    return new GatewayError(429, 'rate_limit_error', 'too_many_failed_attempts', `Too many failed attempts from this address; try again in ${seconds}s.`, null, {
      'Retry-After': String(seconds),
    });
  },
  tooManySignIns: (retryAfterMs: number) => {
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    return new GatewayError(429, 'rate_limit_error', 'too_many_sign_ins', `Too many sign-ins started from this address; try again in ${seconds}s.`, null, { 'Retry-After': String(seconds) });
  },
  /** One email's sign-ins from every address together passed console.signIn.emailMaxFailures: slowed, never locked. */
  signInSlowed: (retryAfterMs: number) => {
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    return new GatewayError(
      429,
      'rate_limit_error',
      'sign_in_slowed',
      `Someone is guessing at this account's password from many addresses, so its sign-ins are slowed to one at a time; try again in ${seconds}s.`,
      null,
      { 'Retry-After': String(seconds) },
    );
  },
  /** Password checks are bounded per process (accounts/passwords.ts): past the queue, refused at once. */
  signInBusy: () =>
    new GatewayError(429, 'rate_limit_error', 'sign_in_busy', 'Too many sign-ins are being checked right now; try again in a second.', null, { 'Retry-After': '1' }),
  hostNotAllowed: () =>
    new GatewayError(403, 'permission_error', 'host_not_allowed', 'This listener does not answer to that Host name; use its address, or add the name to admin.allowedHosts.'),
  adminApiDisabled: () =>
    invalid(404, 'admin_api_disabled', 'The admin API is off: set admin.token (or CHATGATE_ADMIN_TOKEN) to turn it on.'),
  accountNotFound: (id: string) => invalid(404, 'account_not_found', `No account has the id '${withoutKeys(id.slice(0, 64))}'.`, 'id'),
  accountNameTaken: (name: string) => invalid(409, 'account_name_taken', `An account is already named '${withoutKeys(name.slice(0, 200))}'.`, 'name'),
  memberNotFound: (email: string) => invalid(404, 'member_not_found', `'${withoutKeys(email.slice(0, 254))}' is not a member of this account.`, 'email'),
  lastOwner: () => invalid(409, 'last_owner', 'An account keeps at least one owner: make another member owner first.', 'email'),
  notSignedIn: () => invalid(401, 'not_signed_in', 'Sign in to the console first (the session is missing, ended or expired).'),
  invalidCredentials: () => invalid(401, 'invalid_credentials', 'The email or the password is not right.'),
  invalidLink: () => invalid(400, 'invalid_link', 'This link is not valid: it was used already, it expired, or it was never made. Ask for a new one.', 'token'),
  originNotAllowed: () =>
    new GatewayError(403, 'permission_error', 'origin_not_allowed', "This request's Origin is not the console's own: nothing was changed."),
  permissionDenied: (what: string) => new GatewayError(403, 'permission_error', 'permission_denied', `You may not ${what}.`),
  oidcSignInExpired: () =>
    invalid(400, 'oidc_sign_in_expired', 'This sign-in is not under way in this browser: it was used already, it expired, or it was started elsewhere. Sign in again.'),
  oidcSignInFailed: () =>
    invalid(401, 'oidc_sign_in_failed', 'Signing in with the identity provider did not succeed: its answer failed a check, or it gave no verified email. Sign in again.'),
  oidcIdentityConflict: () =>
    new GatewayError(
      403,
      'permission_error',
      'oidc_identity_conflict',
      'Someone here with this email signs in through another account at the identity provider: this one is not let in as them. Ask an admin.',
    ),
  signInHostNotAllowed: () =>
    invalid(400, 'sign_in_host_not_allowed', "Signing in does not start through this Host name: use the console's own address (the operator lists names in console.allowedHosts, or sets console.publicUrl)."),
  inviteHostNotAllowed: () =>
    invalid(400, 'invite_host_not_allowed', "An emailed invitation's link is made from the console's address, and this Host name is not one: use the console's own address (the operator sets console.publicUrl, or lists the name in console.allowedHosts)."),
  identityProviderUnavailable: () =>
    new GatewayError(503, 'api_error', 'identity_provider_unavailable', 'The identity provider cannot be reached right now; try again shortly.', null, { 'Retry-After': '5' }),
  consoleDisabled: () => invalid(404, 'console_disabled', 'The console is off on this gateway (console.enabled: false).'),
  insufficientQuota: (scope: 'key' | 'account' | 'endUser', period: 'day' | 'month', retryAfterSeconds: number, limit: 'tokens' | 'budget' = 'tokens') =>
    new GatewayError(
      429,
      'insufficient_quota',
      'insufficient_quota',
      `You exceeded your current quota: this ${scope === 'key' ? 'API key' : scope === 'account' ? "API key's account" : 'end user (of this API key\'s account)'} has ${limit === 'tokens' ? 'used its tokens' : 'spent its budget'} for this ${period} (UTC); it resets at the start of the next.`,
      null,
      { 'Retry-After': String(Math.max(1, Math.ceil(retryAfterSeconds))) },
    ),
  keyNotFound: (id: string) => invalid(404, 'key_not_found', `No key has the id '${withoutKeys(id.slice(0, 64))}'.`, 'id'),
  keyStoreUnavailable: () =>
    reportedElsewhere(
      new GatewayError(503, 'api_error', 'key_store_unavailable', 'The key store cannot be read right now; try again shortly.', null, {
        'Retry-After': '1',
      }),
    ),
  upstreamUnavailable: () =>
    new GatewayError(502, 'api_error', 'upstream_unavailable', 'The model worker could not be reached; try again shortly.'),
  noHealthyWorker: () =>
    new GatewayError(503, 'api_error', 'upstream_unavailable', 'No worker of this provider is healthy right now; try again shortly.', null, {
      'Retry-After': '1',
    }),
  upstreamOverloaded: (retryAfterSeconds: number) =>
    new GatewayError(503, 'api_error', 'upstream_overloaded', 'Every worker of this provider is busy; try again shortly.', null, {
      'Retry-After': String(retryAfterSeconds),
    }),
  rateLimited: (reason: 'requests' | 'tokens' | 'concurrency', retryAfterMs: number) => {
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    const what = { requests: 'requests per minute', tokens: 'tokens per minute', concurrency: 'concurrent requests' }[reason];
    return new GatewayError(429, 'rate_limit_error', 'rate_limit_exceeded', `Rate limit reached for ${what} on this API key; try again in ${seconds}s.`, null, {
      'Retry-After': String(seconds),
      'retry-after-ms': String(Math.max(0, Math.ceil(retryAfterMs))),
    });
  },
  rateLimiterUnavailable: () =>
    reportedElsewhere(
      new GatewayError(503, 'api_error', 'rate_limiter_unavailable', 'Rate limits cannot be checked right now; try again shortly.', null, {
        'Retry-After': '1',
      }),
    ),
  upstreamTimeout: () => new GatewayError(504, 'api_error', 'upstream_timeout', 'The model worker did not answer in time.'),
  internal: (requestId: string) =>
    new GatewayError(500, 'api_error', 'internal_error', `The gateway failed to handle this request (request id ${requestId}).`),
};

/** What reaches the client for any thrown value: a catalogued error, a framework 4xx, or a generic 500. */
export function toGatewayError(err: unknown, requestId: string): GatewayError {
  if (err instanceof GatewayError) return err;
  // body-parser (the admin API's JSON bodies) says what went wrong in `type`.
  const type = typeof err === 'object' && err !== null ? (err as { type?: unknown }).type : undefined;
  if (type === 'entity.parse.failed') return errors.invalidJson('syntax error');
  if (type === 'entity.too.large') return errors.requestTooLarge((err as { limit?: number }).limit ?? 0);
  if (type === 'encoding.unsupported') return errors.unsupportedContentEncoding();
  const status = httpErrorStatus(err);
  if (status !== undefined && status >= 400 && status < 500) {
    return errors.badRequest('The request could not be read.');
  }
  return errors.internal(requestId);
}

function httpErrorStatus(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { status, statusCode } = err as { status?: unknown; statusCode?: unknown };
  const value = typeof status === 'number' ? status : statusCode;
  return typeof value === 'number' ? value : undefined;
}
