/**
 * Client tokens: short-lived, narrowed stand-ins for a key, for code that runs on people's devices
 * (a browser, a phone) and must not hold the key itself. A key mints one (`POST /v1/client-tokens`,
 * client-token-route.ts); it works as an API key on the model endpoints until it expires, within its
 * parent key's scope narrowed by what the mint asked, and counts as its parent key.
 *
 *   cgt_<YYYYMMDD>.<payload>.<mac>
 *
 * The payload (base64url JSON) names the parent key by the digest of the secret that minted it (so a
 * rotation or revocation of that secret ends the token as it ends the secret), the expiry in epoch
 * milliseconds, and the narrowing. The MAC is HMAC-SHA256 over everything before it, with the day's
 * signing secret: one per UTC day, made by the first replica that mints that day and kept in the
 * store (`client-tokens:<YYYYMMDD>`), so every replica verifies every token, and one read of it a
 * day per process is the only store call verifying costs. Tokens live an hour at most: a day's and
 * the day before's secrets are the only ones accepted. Whoever can read the store can mint tokens
 * (as whoever can read it can read the digests): the store is the secret here as it is for keys.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { CLIENT_TOKEN_PREFIX } from '../common/key-shape';
import type { ServerSecret } from '../store/types';

/** The longest a token may live. */
export const MAX_TTL_SECONDS = 3600;

/** What a token allows beyond its parent key being valid: all narrowing, never widening. */
export interface ClientTokenScope {
  /** The parent key's secret, by digest. */
  parent: string;
  /** Epoch milliseconds; the token stops at this instant. */
  expiresAt: number;
  /** Model names or globs a request must also match (the parent's allow-list still applies). */
  models?: string[];
  /** The endpoints it may call (within the parent's). */
  endpoints?: string[];
  /** Each request's output is bounded to this many tokens, all its answers together. */
  maxTokens?: number;
  /** The end user the minting application vouches for: its requests count as this one, whatever they say. */
  endUser?: string;
}

/** The narrowing asked for does not fit in a token (a few thousand characters of model names). */
export class TokenTooLarge extends Error {}

export type Verified = { scope: ClientTokenScope } | { refused: 'unknown' | 'expired' };

export interface SecretStore {
  getServerSecret(id: string): Promise<ServerSecret | undefined>;
  putServerSecret(secret: ServerSecret): Promise<ServerSecret>;
}

const MAX_PAYLOAD_CHARS = 4096;
const SHAPE = /^cgt_(\d{8})\.([A-Za-z0-9_-]{10,4096})\.([A-Za-z0-9_-]{43})$/;
/** A day's secret the store does not have yet is asked for again after this long (another replica may make it). */
const MISSING_RETRY_MS = 1000;
const DAY_MS = 86_400_000;

const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10).replaceAll('-', '');
const secretId = (day: string) => `client-tokens:${day}`;

export class ClientTokens {
  private readonly secrets = new Map<string, Buffer>();
  private readonly missingUntil = new Map<string, number>();
  private readonly loading = new Map<string, Promise<Buffer | undefined>>();

  constructor(
    private readonly store: SecretStore,
    private readonly now: () => number = Date.now,
  ) {}

  /** A token for this scope (its expiry already set by the caller); TokenTooLarge when the scope does not fit. */
  async mint(scope: ClientTokenScope): Promise<string> {
    const payload = Buffer.from(JSON.stringify({ p: scope.parent, x: scope.expiresAt, m: scope.models, e: scope.endpoints, t: scope.maxTokens, u: scope.endUser, n: randomBytes(6).toString('base64url') })).toString('base64url');
    if (payload.length > MAX_PAYLOAD_CHARS) throw new TokenTooLarge();
    const now = this.now();
    const day = dayOf(now);
    const secret = this.secrets.get(day) ?? (await this.make(day));
    // Tomorrow's is made a day ahead, so that every replica finds it in the store from midnight on
    // (else one asked for it before the first mint of the day would refuse that day's tokens a moment).
    const tomorrow = dayOf(now + DAY_MS);
    if (!this.secrets.has(tomorrow) && !this.loading.has(tomorrow)) {
      const making = this.make(tomorrow).finally(() => this.loading.delete(tomorrow));
      this.loading.set(tomorrow, making.catch(() => undefined));
    }
    const signed = `${CLIENT_TOKEN_PREFIX}${day}.${payload}`;
    return `${signed}.${mac(secret, signed)}`;
  }

  /** What the token allows, or why it is refused: without waiting once the day's secret is known here. */
  verify(token: string): Verified | Promise<Verified> {
    const parts = SHAPE.exec(token);
    if (!parts) return { refused: 'unknown' };
    const [, day, payload, tag] = parts as unknown as [string, string, string, string];
    const now = this.now();
    // A token lives an hour at most: one signed two days back has expired. Tomorrow's is taken (from a
    // replica whose clock is past midnight first): only the gateway has its secret.
    if (day < dayOf(now - DAY_MS)) return { refused: 'expired' };
    if (day > dayOf(now + DAY_MS)) return { refused: 'unknown' };
    const secret = this.secrets.get(day);
    const check = (key: Buffer | undefined): Verified => (key ? this.checked(key, `${CLIENT_TOKEN_PREFIX}${day}.${payload}`, tag, payload) : { refused: 'unknown' });
    if (secret) return check(secret);
    return this.load(day).then(check);
  }

  private checked(secret: Buffer, signed: string, tag: string, payload: string): Verified {
    const expected = Buffer.from(mac(secret, signed));
    if (!timingSafeEqual(expected, Buffer.from(tag))) return { refused: 'unknown' };
    const scope = scopeOf(payload);
    if (!scope) return { refused: 'unknown' };
    // Exact: the gateway made the token, so no clock leeway.
    return this.now() >= scope.expiresAt ? { refused: 'expired' } : { scope };
  }

  private async make(day: string): Promise<Buffer> {
    const kept = await this.store.putServerSecret({ id: secretId(day), secret: randomBytes(32).toString('base64url'), createdAt: new Date(this.now()).toISOString() });
    return this.remember(day, kept.secret);
  }

  private load(day: string): Promise<Buffer | undefined> {
    if ((this.missingUntil.get(day) ?? -Infinity) > this.now()) return Promise.resolve(undefined);
    let loading = this.loading.get(day);
    if (!loading) {
      loading = this.store
        .getServerSecret(secretId(day))
        .then((kept) => {
          if (kept) return this.remember(day, kept.secret);
          this.missingUntil.set(day, this.now() + MISSING_RETRY_MS);
          return undefined;
        })
        .finally(() => this.loading.delete(day));
      this.loading.set(day, loading);
    }
    return loading;
  }

  private remember(day: string, secret: string): Buffer {
    const key = Buffer.from(secret, 'base64url');
    this.secrets.set(day, key);
    this.missingUntil.delete(day);
    // The days no token can still be signed with are forgotten.
    for (const known of this.secrets.keys()) if (known < dayOf(this.now() - DAY_MS)) this.secrets.delete(known);
    return key;
  }
}

const mac = (secret: Buffer, signed: string) => createHmac('sha256', secret).update(signed).digest('base64url');

const isStrings = (value: unknown): value is string[] => Array.isArray(value) && value.every((entry) => typeof entry === 'string');

/** The payload as the gateway wrote it (its MAC checked first), else undefined. */
function scopeOf(payload: string): ClientTokenScope | undefined {
  let fields: Record<string, unknown>;
  try {
    fields = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const { p, x, m, e, t, u } = fields;
  if (typeof p !== 'string' || typeof x !== 'number') return undefined;
  if ((m !== undefined && !isStrings(m)) || (e !== undefined && !isStrings(e)) || (t !== undefined && typeof t !== 'number') || (u !== undefined && typeof u !== 'string')) return undefined;
  return { parent: p, expiresAt: x, models: m, endpoints: e, maxTokens: t, endUser: u };
}
