/**
 * The admin API (/admin/api on the admin listener): key management for scripts and the console.
 * JSON in, JSON out, OpenAI-shape errors. A clear key appears only in the answers to create and
 * rotate; no answer ever carries a digest.
 */
import express, { type Router } from 'express';
import { issueKey, publicView, rotateKey } from '../auth/issue';
import { MAX_LIMIT, nameProblem } from '../auth/key-fields';
import type { KeyChanges, KeyLimits, KeyStore } from '../auth/store/types';
import { errors } from '../errors';

const MAX_MODELS = 100;

/** The router behind the admin token guard (app.ts puts the guard in front of it). */
export function adminApi(store: KeyStore): Router {
  const api = express.Router();
  api.use(express.json({ limit: '64kb' }));

  api.get('/keys', async (_req, res) => {
    res.json({ object: 'list', data: (await store.list()).map(publicView) });
  });

  api.post('/keys', async (req, res) => {
    const body = objectBody(req.body);
    const name = requiredName(body.name);
    const { key, record } = await issueKey(store, { name, models: models(body.models) ?? [], expiresAt: expiry(body.expiresAt) ?? null, rateLimit: limits(body.rateLimit) });
    res.status(201).json({ ...publicView(record), key });
  });

  api.get('/keys/:id', async (req, res) => {
    res.json(publicView(found(await store.get(req.params.id), req.params.id)));
  });

  api.patch('/keys/:id', async (req, res) => {
    const body = objectBody(req.body);
    const changes: KeyChanges = {
      name: body.name === undefined ? undefined : requiredName(body.name),
      models: models(body.models),
      expiresAt: expiry(body.expiresAt)?.toISOString() ?? (body.expiresAt === null ? null : undefined),
      rateLimit: limits(body.rateLimit),
    };
    res.json(publicView(found(await store.update(req.params.id, changes), req.params.id)));
  });

  api.post('/keys/:id/revoke', async (req, res) => {
    res.json(publicView(found(await store.revoke(req.params.id, new Date()), req.params.id)));
  });

  api.post('/keys/:id/rotate', async (req, res) => {
    const rotated = await rotateKey(store, req.params.id);
    const { record, key } = found(rotated, req.params.id);
    res.json({ ...publicView(record), key });
  });

  return api;
}

function found<T>(value: T | undefined, id: string): T {
  if (value === undefined) throw errors.keyNotFound(id);
  return value;
}

function objectBody(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw errors.invalidBody(null, 'The request body must be a JSON object.');
  return body as Record<string, unknown>;
}

function requiredName(name: unknown): string {
  const problem = nameProblem(name);
  if (problem) throw errors.invalidBody('name', `'name' ${problem}.`);
  return (name as string).trim();
}

function models(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || value.length > MAX_MODELS || !value.every((m) => typeof m === 'string' && m.length > 0 && m.length <= 300)) {
    throw errors.invalidBody('models', `'models' must be an array of at most ${MAX_MODELS} model globs such as "mock/*".`);
  }
  return value;
}

/** `{requestsPerMinute, tokensPerMinute, maxConcurrent}`: a whole number, 0 for no limit, null for the default. */
function limits(value: unknown): Partial<KeyLimits> | undefined {
  if (value === undefined) return undefined;
  const shape = "'rateLimit' must be an object with requestsPerMinute, tokensPerMinute and maxConcurrent: whole numbers (0: no limit) or null (the default).";
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw errors.invalidBody('rateLimit', shape);
  const result: Partial<KeyLimits> = {};
  for (const [name, limit] of Object.entries(value)) {
    if (!['requestsPerMinute', 'tokensPerMinute', 'maxConcurrent'].includes(name)) throw errors.invalidBody(`rateLimit.${name}`, shape);
    if (limit !== null && !(Number.isInteger(limit) && (limit as number) >= 0 && (limit as number) <= MAX_LIMIT)) {
      throw errors.invalidBody(`rateLimit.${name}`, `${shape} At most ${MAX_LIMIT}.`);
    }
    result[name as keyof KeyLimits] = limit as number | null;
  }
  return result;
}

function expiry(value: unknown): Date | undefined {
  if (value === undefined || value === null) return undefined;
  const at = typeof value === 'string' ? new Date(value) : new Date(Number.NaN);
  if (Number.isNaN(at.getTime())) throw errors.invalidBody('expiresAt', "'expiresAt' must be an ISO-8601 date such as 2027-01-31T00:00:00Z, or null.");
  return at;
}
