import { readFileSync } from 'node:fs';
import path from 'node:path';
import { errors, GatewayError, toGatewayError, WWW_AUTHENTICATE } from '../src/errors';

type Factory = keyof typeof errors;
interface Expected {
  error: GatewayError;
  status: number;
  type: string;
  code: string;
  param: string | null;
  headers: Record<string, string>;
}

const challenge = { 'WWW-Authenticate': WWW_AUTHENTICATE };
const entry = (error: GatewayError, status: number, type: string, code: string, param: string | null = null, headers: Record<string, string> = {}) =>
  ({ error, status, type, code, param, headers }) satisfies Expected;

/** One row per factory in the catalogue, with what DESIGN.md's error table says it must be. */
const catalogue: Record<Factory, Expected> = {
  httpsRequired: entry(errors.httpsRequired(), 403, 'invalid_request_error', 'https_required'),
  missingApiKey: entry(errors.missingApiKey(), 401, 'invalid_request_error', 'missing_api_key', null, challenge),
  invalidAuthorizationHeader: entry(errors.invalidAuthorizationHeader('the scheme is unknown'), 401, 'invalid_request_error', 'invalid_authorization_header', null, challenge),
  invalidSignature: entry(errors.invalidSignature(), 401, 'invalid_request_error', 'invalid_signature'),
  invalidApiKey: entry(errors.invalidApiKey(), 401, 'invalid_request_error', 'invalid_api_key', null, challenge),
  modelNotPricedUnderBudget: entry(errors.modelNotPricedUnderBudget('p/m'), 403, 'permission_error', 'model_not_priced', 'model'),
  modelNotPriced: entry(errors.modelNotPriced('p/m'), 403, 'permission_error', 'model_not_priced', 'model'),
  modelNotAllowed: entry(errors.modelNotAllowed('p/m'), 403, 'permission_error', 'model_not_allowed', 'model'),
  invalidJson: entry(errors.invalidJson('unexpected end'), 400, 'invalid_request_error', 'invalid_json'),
  invalidBody: entry(errors.invalidBody('messages[0].role', 'messages[0].role must be a known role.'), 400, 'invalid_request_error', 'invalid_body', 'messages[0].role'),
  invalidHeader: entry(errors.invalidHeader('X-Chatgate-End-User', "'X-Chatgate-End-User' is too long."), 400, 'invalid_request_error', 'invalid_header', 'X-Chatgate-End-User'),
  unsupportedContentEncoding: entry(errors.unsupportedContentEncoding(), 415, 'invalid_request_error', 'unsupported_content_encoding'),
  requestTooLarge: entry(errors.requestTooLarge(16), 413, 'invalid_request_error', 'request_too_large'),
  badRequest: entry(errors.badRequest('The request could not be read.'), 400, 'invalid_request_error', 'invalid_request'),
  malformedRequest: entry(errors.malformedRequest(), 400, 'invalid_request_error', 'malformed_request'),
  headersTooLarge: entry(errors.headersTooLarge(), 431, 'invalid_request_error', 'request_headers_too_large'),
  requestTimeout: entry(errors.requestTimeout(), 408, 'invalid_request_error', 'request_timeout'),
  modelNotFound: entry(errors.modelNotFound('p/m'), 404, 'invalid_request_error', 'model_not_found', 'model'),
  modelNotServedHere: entry(errors.modelNotServedHere('p/m', '/v1/embeddings'), 404, 'invalid_request_error', 'model_not_found', 'model'),
  ipNotAllowed: entry(errors.ipNotAllowed(), 403, 'permission_error', 'ip_not_allowed'),
  endpointNotAllowed: entry(errors.endpointNotAllowed('/v1/embeddings'), 403, 'permission_error', 'endpoint_not_allowed'),
  routeNotFound: entry(errors.routeNotFound('GET', '/v2/x'), 404, 'invalid_request_error', 'not_found'),
  methodNotAllowed: entry(errors.methodNotAllowed('GET', 'POST'), 405, 'invalid_request_error', 'method_not_allowed', null, { Allow: 'POST' }),
  tooManyFailedAttempts: entry(errors.tooManyFailedAttempts(30_000), 429, 'rate_limit_error', 'too_many_failed_attempts', null, { 'Retry-After': '30' }),
  tooManySignIns: entry(errors.tooManySignIns(1_500), 429, 'rate_limit_error', 'too_many_sign_ins', null, { 'Retry-After': '2' }),
  signInSlowed: entry(errors.signInSlowed(44_200), 429, 'rate_limit_error', 'sign_in_slowed', null, { 'Retry-After': '45' }),
  signInBusy: entry(errors.signInBusy(), 429, 'rate_limit_error', 'sign_in_busy', null, { 'Retry-After': '1' }),
  hostNotAllowed: entry(errors.hostNotAllowed(), 403, 'permission_error', 'host_not_allowed'),
  accountNotFound: entry(errors.accountNotFound('acc_x'), 404, 'invalid_request_error', 'account_not_found', 'id'),
  accountNameTaken: entry(errors.accountNameTaken('team-a'), 409, 'invalid_request_error', 'account_name_taken', 'name'),
  memberNotFound: entry(errors.memberNotFound('a@example.com'), 404, 'invalid_request_error', 'member_not_found', 'email'),
  lastOwner: entry(errors.lastOwner(), 409, 'invalid_request_error', 'last_owner', 'email'),
  notSignedIn: entry(errors.notSignedIn(), 401, 'invalid_request_error', 'not_signed_in'),
  invalidCredentials: entry(errors.invalidCredentials(), 401, 'invalid_request_error', 'invalid_credentials'),
  invalidLink: entry(errors.invalidLink(), 400, 'invalid_request_error', 'invalid_link', 'token'),
  inviteHostNotAllowed: entry(errors.inviteHostNotAllowed(), 400, 'invalid_request_error', 'invite_host_not_allowed'),
  originNotAllowed: entry(errors.originNotAllowed(), 403, 'permission_error', 'origin_not_allowed'),
  permissionDenied: entry(errors.permissionDenied('manage members'), 403, 'permission_error', 'permission_denied'),
  oidcSignInExpired: entry(errors.oidcSignInExpired(), 400, 'invalid_request_error', 'oidc_sign_in_expired'),
  oidcSignInFailed: entry(errors.oidcSignInFailed(), 401, 'invalid_request_error', 'oidc_sign_in_failed'),
  oidcIdentityConflict: entry(errors.oidcIdentityConflict(), 403, 'permission_error', 'oidc_identity_conflict'),
  signInHostNotAllowed: entry(errors.signInHostNotAllowed(), 400, 'invalid_request_error', 'sign_in_host_not_allowed'),
  identityProviderUnavailable: entry(errors.identityProviderUnavailable(), 503, 'api_error', 'identity_provider_unavailable', null, { 'Retry-After': '5' }),
  consoleDisabled: entry(errors.consoleDisabled(), 404, 'invalid_request_error', 'console_disabled'),
  insufficientQuota: entry(errors.insufficientQuota('account', 'day', 3600), 429, 'insufficient_quota', 'insufficient_quota', null, { 'Retry-After': '3600' }),
  keyStoreUnavailable: entry(errors.keyStoreUnavailable(), 503, 'api_error', 'key_store_unavailable', null, { 'Retry-After': '1' }),
  upstreamUnavailable: entry(errors.upstreamUnavailable(), 502, 'api_error', 'upstream_unavailable'),
  noHealthyWorker: entry(errors.noHealthyWorker(), 503, 'api_error', 'upstream_unavailable', null, { 'Retry-After': '1' }),
  upstreamOverloaded: entry(errors.upstreamOverloaded(3), 503, 'api_error', 'upstream_overloaded', null, { 'Retry-After': '3' }),
  rateLimited: entry(errors.rateLimited('requests', 1500), 429, 'rate_limit_error', 'rate_limit_exceeded', null, { 'Retry-After': '2', 'retry-after-ms': '1500' }),
  rateLimiterUnavailable: entry(errors.rateLimiterUnavailable(), 503, 'api_error', 'rate_limiter_unavailable', null, { 'Retry-After': '1' }),
  upstreamTimeout: entry(errors.upstreamTimeout(), 504, 'api_error', 'upstream_timeout'),
  internal: entry(errors.internal('req-1'), 500, 'api_error', 'internal_error'),
  invalidAdminToken: entry(errors.invalidAdminToken(), 401, 'invalid_request_error', 'invalid_admin_token', null, { 'WWW-Authenticate': 'Bearer realm="chatgate-admin"' }),
  adminApiDisabled: entry(errors.adminApiDisabled(), 404, 'invalid_request_error', 'admin_api_disabled'),
  keyNotFound: entry(errors.keyNotFound('key_nope'), 404, 'invalid_request_error', 'key_not_found', 'id'),
};

describe('the error catalogue', () => {
  test('every factory is covered here', () => {
    expect(Object.keys(errors).sort()).toEqual(Object.keys(catalogue).sort());
  });

  test.each(Object.entries(catalogue))('%s', (_name, { error, status, type, code, param, headers }) => {
    expect(error).toBeInstanceOf(GatewayError);
    expect(error).toBeInstanceOf(Error);
    expect(error.status).toBe(status);
    expect(error.headers).toEqual(headers);
    expect(error.toBody()).toStrictEqual({ error: { message: error.message, type, param, code } });
    expect(error.message.length).toBeGreaterThan(10);
  });

  test("docs/errors.md lists exactly the catalogue's codes, each with its status and type", () => {
    const doc = readFileSync(path.join(__dirname, '..', 'docs', 'errors.md'), 'utf8');
    const table = doc.slice(doc.indexOf('## The catalogue'));
    const documented = [...table.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \| `([a-z_]+)` \|/gm)].map(([, code, status, type]) => `${code} ${status} ${type}`);
    const written = Object.values(catalogue).map(({ code, status, type }) => `${code} ${status} ${type}`);
    expect(documented.length).toBeGreaterThan(40); // control: the table's rows are read
    expect([...new Set(documented)].sort()).toEqual([...new Set(written)].sort());
  });

  test('401s tell the client both schemes', () => {
    for (const error of [errors.missingApiKey(), errors.invalidAuthorizationHeader('x'), errors.invalidApiKey()]) {
      expect(error.headers['WWW-Authenticate']).toBe(WWW_AUTHENTICATE);
    }
  });

  test('messages carry what helps the client and nothing else', () => {
    expect(errors.modelNotAllowed('vllm/llama').message).toContain("'vllm/llama'");
    expect(errors.modelNotFound('nope/x').message).toContain("'nope/x'");
    expect(errors.requestTooLarge(16777216).message).toContain('16777216');
    expect(errors.invalidAuthorizationHeader('the scheme is unknown').message).toBe('Invalid Authorization header: the scheme is unknown.');
    expect(errors.methodNotAllowed('GET', 'POST').message).toContain('POST');
  });

  test('rate limits round the wait up to whole seconds, never below one', () => {
    expect(errors.rateLimited('tokens', 0).headers).toEqual({ 'Retry-After': '1', 'retry-after-ms': '0' });
    expect(errors.rateLimited('concurrency', 1).headers).toEqual({ 'Retry-After': '1', 'retry-after-ms': '1' });
    expect(errors.rateLimited('requests', 60_000).headers).toEqual({ 'Retry-After': '60', 'retry-after-ms': '60000' });
    expect(errors.rateLimited('requests', 60_001).headers['Retry-After']).toBe('61');
  });
});

describe('toGatewayError', () => {
  test('a GatewayError passes unchanged', () => {
    for (const error of [errors.invalidApiKey(), errors.upstreamTimeout(), errors.invalidBody('model', 'bad')]) {
      expect(toGatewayError(error, 'r1')).toBe(error);
    }
  });

  test.each([
    ['an http-errors style 400', Object.assign(new Error('secret detail'), { status: 400, expose: true })],
    ['a plain object with status 400', { status: 400, message: 'secret detail' }],
    ['an error with statusCode 404', Object.assign(new Error('secret detail'), { statusCode: 404 })],
  ])('%s becomes a 400 invalid_request, without its message', (_name, thrown) => {
    const mapped = toGatewayError(thrown, 'r1');
    expect(mapped.toBody()).toEqual({ error: { message: expect.any(String), type: 'invalid_request_error', param: null, code: 'invalid_request' } });
    expect(mapped.status).toBe(400);
    expect(mapped.message).not.toContain('secret detail');
  });

  test('body-parser faults keep their meaning', () => {
    const syntax = Object.assign(new SyntaxError('Unexpected token } in JSON at position 7: {"key":"cgk_x"}'), { status: 400, type: 'entity.parse.failed' });
    expect(toGatewayError(syntax, 'r1')).toMatchObject({ status: 400, code: 'invalid_json' });
    expect(toGatewayError(syntax, 'r1').message).not.toContain('cgk_x');
    const tooLarge = Object.assign(new Error('request entity too large'), { status: 413, type: 'entity.too.large', limit: 1024 });
    expect(toGatewayError(tooLarge, 'r1')).toMatchObject({ status: 413, code: 'request_too_large' });
    expect(toGatewayError(tooLarge, 'r1').message).toContain('1024');
  });

  test.each([
    ['an Error', new Error('db password is hunter2')],
    ['a TypeError', new TypeError('hunter2 is not a function')],
    ['a string', 'hunter2'],
    ['undefined', undefined],
    ['null', null],
    ['a number', 400],
    ['an object with status 503', { status: 503, message: 'hunter2' }],
    ['an object with statusCode 500', { statusCode: 500, message: 'hunter2' }],
    ['an object with a string status', { status: '400', message: 'hunter2' }],
    ['an object with status 302', { status: 302, message: 'hunter2' }],
  ])('anything else (%s) is a 500 internal_error carrying the request id and nothing of the fault', (_name, thrown) => {
    const mapped = toGatewayError(thrown, 'req-42');
    expect(mapped).toBeInstanceOf(GatewayError);
    expect(mapped.status).toBe(500);
    expect(mapped.toBody()).toEqual({ error: { message: expect.any(String), type: 'api_error', param: null, code: 'internal_error' } });
    expect(mapped.message).toContain('req-42');
    expect(mapped.message).not.toContain('hunter2');
    expect(mapped.headers).toEqual({});
  });
});
