/**
 * Property tests (fast-check) for the pure stages: whatever they are given, they answer with a value
 * or a typed refusal and never throw; the two auth schemes always agree; the limiter's arithmetic
 * keeps its invariants. A fixed seed in CI; fast-check prints the seed and the shrunk input on failure.
 */
import fc from 'fast-check';
import { parseAuthorization } from '../src/auth/credentials';
import { GatewayError } from '../src/errors';
import { admit, debit, refilled, WINDOW_MS } from '../src/ratelimit/bucket';
import { splitModel, validateChatRequest } from '../src/pipeline/validate';

const settings = { numRuns: 2000, ...(process.env.CI ? { seed: 20261123 } : {}) };
const B64TOKEN_CHARS = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/'];
const b64token = fc
  .tuple(fc.array(fc.constantFrom(...B64TOKEN_CHARS), { minLength: 1, maxLength: 80 }), fc.nat({ max: 2 }))
  .map(([chars, padding]) => chars.join('') + '='.repeat(padding));

describe('parseAuthorization', () => {
  test('any header string: a key or a typed refusal, never a throw, never quoting the header', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.constant(undefined)), (header) => {
        const result = parseAuthorization(header);
        if (result.ok) {
          expect(typeof result.key).toBe('string');
          expect(result.key.length).toBeGreaterThan(0);
        } else {
          expect(['missing', 'malformed']).toContain(result.problem);
          if (result.problem === 'malformed' && header && header.trim().length > 8) expect(result.reason).not.toContain(header.trim());
        }
      }),
      settings,
    );
  });

  test('Bearer <key> and Basic base64(<key>:) always name the same key, whatever the scheme case and spacing', () => {
    fc.assert(
      fc.property(b64token, fc.constantFrom('Bearer', 'bearer', 'BEARER'), fc.constantFrom('Basic', 'basic'), fc.constantFrom(' ', '  ', '\t'), (key, bearer, basic, gap) => {
        const viaBearer = parseAuthorization(`${bearer}${gap}${key}`);
        const viaBasic = parseAuthorization(`${basic}${gap}${Buffer.from(`${key}:`).toString('base64')}`);
        expect(viaBearer).toEqual({ ok: true, key, scheme: 'bearer' });
        expect(viaBasic).toEqual({ ok: true, key, scheme: 'basic' });
      }),
      settings,
    );
  });
});

describe('validateChatRequest', () => {
  const isRefusal = (result: unknown) => result instanceof GatewayError && result.status === 400 && result.code === 'invalid_body';

  test('any JSON value: a ChatRequest or a 400 naming a param, never a throw', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const result = validateChatRequest(value);
        if (result instanceof GatewayError) {
          expect(isRefusal(result)).toBe(true);
          expect(result.param === null || typeof result.param === 'string').toBe(true);
        } else {
          expect(result.model).toBe(`${result.provider}/${result.modelName}`);
        }
      }),
      settings,
    );
  });

  test('bodies shaped like chat requests, with anything in their members, are judged without throwing', () => {
    const message = fc.record({ role: fc.oneof(fc.constantFrom('system', 'developer', 'user', 'assistant', 'tool'), fc.jsonValue()), content: fc.jsonValue() }, { requiredKeys: [] });
    const body = fc.record(
      {
        model: fc.oneof(fc.string(), fc.jsonValue()),
        messages: fc.oneof(fc.array(fc.oneof(message, fc.jsonValue()), { maxLength: 5 }), fc.jsonValue()),
        stream: fc.jsonValue(),
        stream_options: fc.jsonValue(),
        ['__proto__']: fc.oneof(fc.jsonValue(), fc.constant({ polluted: true })),
        constructor: fc.jsonValue(),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(body, (value) => {
        const result = validateChatRequest(JSON.parse(JSON.stringify(value)));
        expect(result instanceof GatewayError ? isRefusal(result) : result.model === (value as { model?: unknown }).model).toBe(true);
        expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      }),
      settings,
    );
  });
});

describe('splitModel', () => {
  test('<provider>/<name> splits at the first slash and joins back to the input; a name without one is an alias candidate; anything else is a 400 on model', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.jsonValue()), (model) => {
        const result = splitModel(model);
        if (result instanceof GatewayError) {
          expect(result.param).toBe('model');
        } else if (result.provider === undefined || result.modelName === undefined) {
          expect(result.model).toBe(model);
          expect(result.model).not.toContain('/');
          expect(result.modelName).toBeUndefined();
        } else {
          expect(result.provider.length).toBeGreaterThan(0);
          expect(result.provider).not.toContain('/');
          expect(result.modelName.length).toBeGreaterThan(0);
          expect(`${result.provider}/${result.modelName}`).toBe(model);
        }
      }),
      settings,
    );
  });
});

describe('rate-limit arithmetic', () => {
  const limit = fc.integer({ min: 1, max: 100_000 });
  const time = fc.integer({ min: 0, max: 10 * WINDOW_MS });

  test('a bucket never refills above its limit, and never loses units by waiting', () => {
    fc.assert(
      fc.property(limit, fc.double({ min: -1e6, max: 1e6, noNaN: true }), time, time, (max, level, at, wait) => {
        const bucket = { level: Math.min(level, max), at };
        const later = refilled(bucket, max, at + wait);
        expect(later.level).toBeLessThanOrEqual(max);
        expect(later.level).toBeGreaterThanOrEqual(bucket.level);
      }),
      settings,
    );
  });

  test('within one instant, no more requests are admitted than the limit', () => {
    fc.assert(
      fc.property(limit.filter((n) => n <= 500), fc.integer({ min: 1, max: 600 }), time, (rpm, attempts, now) => {
        let state: { requests?: ReturnType<typeof refilled> } = {};
        let admitted = 0;
        for (let i = 0; i < attempts; i++) {
          const decision = admit(state, { requestsPerMinute: rpm }, now);
          if (decision.allowed) admitted++;
          else expect(decision.retryAfterMs).toBeGreaterThan(0);
          state = { requests: decision.requests };
        }
        expect(admitted).toBe(Math.min(rpm, attempts));
      }),
      { ...settings, numRuns: 200 }, // each run loops up to 600 admissions
    );
  });

  test('tokens debited below zero refuse until refilled, and the wait is what the refill needs', () => {
    fc.assert(
      fc.property(limit, fc.integer({ min: 1, max: 1_000_000 }), time, (tpm, used, now) => {
        const bucket = debit(undefined, tpm, now, used);
        const decision = admit({ tokens: bucket }, { tokensPerMinute: tpm }, now);
        if (bucket.level > 0) return expect(decision.allowed).toBe(true);
        expect(decision).toMatchObject({ allowed: false, reason: 'tokens' });
        expect(admit({ tokens: bucket }, { tokensPerMinute: tpm }, now + decision.retryAfterMs).allowed).toBe(true);
      }),
      settings,
    );
  });
});
