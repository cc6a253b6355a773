/**
 * `POST /v1/client-tokens`: a key mints a client token (client-tokens.ts). Minting is never open to
 * browsers (pipeline/cors.ts answers no preflight here): it takes the key itself.
 */
import express, { type Request, type RequestHandler } from 'express';
import { ENDPOINTS } from '../common/endpoints';
import { withoutKeys } from '../common/key-shape';
import { modelAllowed } from '../common/model-globs';
import { contextOf, required } from '../context';
import { errors } from '../errors';
import { parseAuthorization } from './credentials';
import { MAX_TTL_SECONDS, TokenTooLarge, type ClientTokens, type ClientTokenScope } from './client-tokens';
import { digestKey } from './keys';
import { WORKLOAD_KEY_PREFIX } from './workload-identity';

export const CLIENT_TOKENS_PATH = '/v1/client-tokens';
const DEFAULT_TTL_SECONDS = 600;
const FIELDS = new Set(['ttlSeconds', 'models', 'endpoints', 'maxTokens', 'endUser']);
const MAX_MODELS = 100;
const MAX_BODY_BYTES = 16 * 1024;

/** The mint: its body read raw and bounded (never inflated), then checked field by field. */
export function mintClientTokens(tokens: ClientTokens, now: () => number = Date.now): RequestHandler[] {
  const raw = express.raw({ type: () => true, limit: MAX_BODY_BYTES, inflate: false });
  const mint: RequestHandler = async (req, res) => {
    const key = required(contextOf(res).key, 'key');
    if (key.clientToken) throw errors.permissionDenied('mint a client token with a client token');
    // A token ends with the stored secret that minted it; a workload's JWT is no stored secret.
    if (key.id.startsWith(WORKLOAD_KEY_PREFIX)) throw errors.permissionDenied('mint a client token with a workload identity');
    const asked = requestOf(req);
    const ttlSeconds = asked.ttlSeconds ?? DEFAULT_TTL_SECONDS;
    if (asked.models) {
      const outside = asked.models.find((model) => !modelAllowed(key.models, model));
      if (outside !== undefined) throw errors.invalidBody('models', `'${withoutKeys(outside)}' is not among the models this key may use.`);
    }
    if (asked.endpoints && key.endpoints.length > 0) {
      const outside = asked.endpoints.find((endpoint) => !key.endpoints.includes(endpoint));
      if (outside !== undefined) throw errors.invalidBody('endpoints', `'${outside}' is not among the endpoints this key may call.`);
    }
    // The secret that authenticated the request, by digest: a token ends with it (rotation, revocation).
    const credentials = parseAuthorization(req.headers.authorization);
    if (!credentials.ok) throw errors.missingApiKey(); // authenticated already: not reached
    // Never past the key's own end: its expiry, or the grace of the secret that asked (a rotation's).
    const record = key as typeof key & { expiresAt?: string | null; previousKey?: true; previousKeyExpiresAt?: string };
    const keyEnds = [record.expiresAt, record.previousKey ? record.previousKeyExpiresAt : undefined].filter((at): at is string => typeof at === 'string').map(Date.parse);
    const expiresAt = Math.min(now() + ttlSeconds * 1000, ...keyEnds);
    // Endpoints and models not asked for are the key's as they are at each request, not as they are now.
    const scope: ClientTokenScope = { parent: digestKey(credentials.key), expiresAt, models: asked.models, endpoints: asked.endpoints, maxTokens: asked.maxTokens, endUser: asked.endUser };
    const token = await tokens.mint(scope).catch((err: unknown) => {
      throw err instanceof TokenTooLarge ? errors.invalidBody('models', 'The models asked for are too long together to fit in a token: name fewer, or use a glob.') : err;
    });
    res.status(201).set('cache-control', 'no-store').json({ token, expiresAt: new Date(expiresAt).toISOString() });
  };
  return [raw, mint];
}

interface MintRequest {
  ttlSeconds?: number;
  models?: string[];
  endpoints?: string[];
  maxTokens?: number;
  endUser?: string;
}

/** The body's fields, each checked; unknown fields are refused, not ignored. An empty body asks for the defaults. */
function requestOf(req: Request): MintRequest {
  const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
  if (body.length === 0) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw errors.invalidJson('syntax error'); // the parser's message quotes the body: it may hold a key
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw errors.invalidBody(null, 'The body must be a JSON object.');
  const fields = parsed as Record<string, unknown>;
  const unknown = Object.keys(fields).find((field) => !FIELDS.has(field));
  if (unknown !== undefined) {
    const named = withoutKeys(unknown.slice(0, 64));
    throw errors.invalidBody(named, `Unknown field '${named}': a client token takes ttlSeconds, models, endpoints, maxTokens and endUser.`);
  }
  const { ttlSeconds, models, endpoints, maxTokens, endUser } = fields;
  if (ttlSeconds !== undefined && !(Number.isInteger(ttlSeconds) && (ttlSeconds as number) >= 1 && (ttlSeconds as number) <= MAX_TTL_SECONDS)) {
    throw errors.invalidBody('ttlSeconds', `ttlSeconds must be a whole number of seconds from 1 to ${MAX_TTL_SECONDS}.`);
  }
  if (models !== undefined && !(Array.isArray(models) && models.length >= 1 && models.length <= MAX_MODELS && models.every((model) => typeof model === 'string' && model.length >= 1 && model.length <= 256))) {
    throw errors.invalidBody('models', `models must be a list of 1 to ${MAX_MODELS} model names or globs.`);
  }
  const known: readonly string[] = ENDPOINTS;
  if (endpoints !== undefined && !(Array.isArray(endpoints) && endpoints.length >= 1 && endpoints.every((endpoint) => typeof endpoint === 'string' && known.includes(endpoint)))) {
    throw errors.invalidBody('endpoints', `endpoints must be a list of at least one of ${ENDPOINTS.join(', ')}.`);
  }
  if (maxTokens !== undefined && !(Number.isInteger(maxTokens) && (maxTokens as number) >= 1 && (maxTokens as number) <= 10_000_000)) {
    throw errors.invalidBody('maxTokens', 'maxTokens must be a whole number from 1 to 10000000.');
  }
  if (endUser !== undefined && !(typeof endUser === 'string' && endUser.length >= 1 && endUser.length <= 256)) throw errors.invalidBody('endUser', 'endUser must be the id of your user, 1 to 256 characters.');
  return { ttlSeconds: ttlSeconds as number | undefined, models: models as string[] | undefined, endpoints: endpoints as string[] | undefined, maxTokens: maxTokens as number | undefined, endUser: endUser as string | undefined };
}
