/**
 * Workload identity: a Bearer JWT signed by an issuer the config trusts (Kubernetes service-account
 * tokens, GitHub Actions and GitLab CI OIDC tokens, cloud workload identities) stands for an account,
 * and no secret is kept here. `auth.workloadIdentity` lists rules {issuer, audience, subject (a glob),
 * account (its name), claims, models, rateLimit}; the first rule of the token's issuer whose audience
 * the token names, whose glob its subject matches and whose claims it carries decides. No rule: 401,
 * as for an unknown key.
 *
 * The issuer's keys: its discovery document (`<issuer>/.well-known/openid-configuration`, whose
 * `issuer` must be the configured one, OpenID Connect Discovery 4.3) names its JWKS (https only). Both
 * are fetched on first use, within FETCH_TIMEOUT_MS and MAX_DOCUMENT_BYTES; the JWKS again once it is
 * JWKS_FRESH_MS old (in the background: requests go on with the keys known) and at once for a token
 * whose `kid` it lacks (the issuer rotated its key), at most once per REFETCH_MIN_MS an issuer, so a
 * flood of made-up kids costs the issuer one request a second. A failed fetch (or a malformed set)
 * keeps the keys known; with none known, a failing issuer is asked at most every FAILED_RETRY_MS.
 *
 * Checked (jose): the signature, asymmetric algorithms only (`none` and HMAC never: a public key is
 * not a shared secret), each key with its own algorithm; `iss`; `aud`; `exp` (required) and `nbf`,
 * with CLOCK_TOLERANCE_SECONDS for the issuer's clock, and at most MAX_LIFETIME_MS away; `sub`
 * (required, at most MAX_SUBJECT). Any failure to verify is a refusal (401), never a 5xx. A verified
 * token is kept, by its digest, until it expires or VERIFIED_MAX_MS has passed.
 *
 * The identity is a key that is no row: id `workload:<tag>:<subject>` (workloadKeyId), named by its subject, of the rule's
 * account, with the rule's models and rate limit and no quota or budget of its own: its use counts to
 * the account and shows in the console under the subject. It cannot mint client tokens.
 */
import { LRUCache } from 'lru-cache';
import { fetchBoundedText } from '../common/bounded-fetch';
import { globMatches } from '../common/model-globs';
import { sha256Hex } from '../common/sha256';
import type { Config } from '../config';
import { errors, GatewayError } from '../errors';
import type { Logger } from '../telemetry/log';
import type { AccountStore, KeyAuthRecord } from '../store/types';
import { NO_BUDGET, NO_QUOTA } from '../store/types';

export type WorkloadRule = Config['auth']['workloadIdentity'][number];

/** How a workload identity's key id begins (workloadKeyId). */
export const WORKLOAD_KEY_PREFIX = 'workload:';
export const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];
export const CLOCK_TOLERANCE_SECONDS = 30;
export const MAX_SUBJECT = 255;
const FETCH_TIMEOUT_MS = 5_000;
const MAX_DOCUMENT_BYTES = 512 * 1024;
const JWKS_FRESH_MS = 5 * 60_000;
export const REFETCH_MIN_MS = 1_000;
const VERIFIED_MAX_MS = 30_000;
/** A token that claims to live longer is refused (Kubernetes' extended service-account tokens live a year). */
const MAX_LIFETIME_MS = 400 * 86_400_000;
/** While an issuer's fetches fail and no keys are known, it is asked again at most this often. */
const FAILED_RETRY_MS = 5_000;
const VERIFIED_ENTRIES = 10_000;
const ACCOUNT_TTL_MS = 30_000;
const NO_ACCOUNT_TTL_MS = 5_000;

/** A JWT's shape: three base64url parts (the last empty for `alg: none`, refused later), the first a JSON object (`eyJ` is `{"`). */
const JWT_SHAPE = /^eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
export const looksLikeJwt = (credential: string): boolean => JWT_SHAPE.test(credential);

export type Checked = { record: KeyAuthRecord } | { refused: string };

interface Verified {
  readonly record: KeyAuthRecord;
  /** ms: the token's expiry (with the tolerance) or VERIFIED_MAX_MS after it was checked, whichever is sooner. */
  readonly until: number;
}

/** jose is ESM only: its types, named as the import() below loads it (this module is CommonJS). */
type Jose = typeof import('jose', { with: { 'resolution-mode': 'import' } });
type JSONWebKeySet = import('jose', { with: { 'resolution-mode': 'import' } }).JSONWebKeySet;
type JWTPayload = import('jose', { with: { 'resolution-mode': 'import' } }).JWTPayload;
type JWTVerifyOptions = import('jose', { with: { 'resolution-mode': 'import' } }).JWTVerifyOptions;
type KeyResolver = ReturnType<Jose['createLocalJWKSet']>;

/**
 * One trusted issuer: where its keys are, the keys (as jose's resolver, made when they were fetched:
 * a malformed set is a failed fetch and never replaces good keys), and when they were fetched. While
 * its fetches fail and no keys are known, it is asked again at most every FAILED_RETRY_MS (tokens of it
 * are 503 meanwhile, without a fetch each), and the failure is logged once until a fetch succeeds.
 */
class Issuer {
  private jwksUri: string | undefined;
  private keys: KeyResolver | undefined;
  private fetchedAt = -Infinity;
  private failing = false;
  private fetching: Promise<void> | undefined;

  constructor(
    readonly issuer: string,
    private readonly log: Logger,
    private readonly now: () => number,
  ) {}

  /** The keys, fetched first when there are none yet (none to be had: 503, no token of this issuer can be checked). */
  async current(): Promise<KeyResolver> {
    if (!this.keys && !(this.failing && this.now() - this.fetchedAt < FAILED_RETRY_MS)) await this.refetch().catch(() => undefined);
    else if (this.keys && this.now() - this.fetchedAt > JWKS_FRESH_MS) void this.refetch().catch(() => undefined);
    if (!this.keys) throw errors.identityProviderUnavailable();
    return this.keys;
  }

  /** The keys again, for a kid they lack; false when the last fetch was too recent to ask again. */
  async refetchForKid(): Promise<boolean> {
    if (this.fetching) await this.fetching.catch(() => undefined);
    else {
      if (this.now() - this.fetchedAt < REFETCH_MIN_MS) return false;
      await this.refetch().catch(() => undefined);
    }
    return true;
  }

  private refetch(): Promise<void> {
    this.fetching ??= this.fetch().finally(() => (this.fetching = undefined));
    return this.fetching;
  }

  /** Discovery (when its JWKS address is not known, or the last fetch failed) and the JWKS, within one FETCH_TIMEOUT_MS. */
  private async fetch(): Promise<void> {
    this.fetchedAt = this.now();
    const deadline = this.fetchedAt + FETCH_TIMEOUT_MS;
    const left = () => Math.max(1, deadline - this.now());
    try {
      const jwksUri = this.jwksUri ?? (await this.discover(left()));
      const jose = await import('jose');
      const resolver = jose.createLocalJWKSet(JSON.parse(await fetchBoundedText(jwksUri, MAX_DOCUMENT_BYTES, left())) as JSONWebKeySet);
      [this.jwksUri, this.keys, this.fetchedAt] = [jwksUri, resolver, this.now()];
      if (this.failing) this.log.info({ issuer: this.issuer }, "workload identity: the issuer's keys are fetched again");
      this.failing = false;
    } catch (err) {
      this.jwksUri = undefined; // discovered again next time: the issuer may have moved its keys
      if (!this.failing) this.log.warn({ issuer: this.issuer, reason: err instanceof Error ? err.message : String(err) }, "workload identity: the issuer's keys could not be fetched; the keys known before stay");
      this.failing = true;
      throw err;
    }
  }

  private async discover(timeoutMs: number): Promise<string> {
    const url = `${this.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
    const document = JSON.parse(await fetchBoundedText(url, MAX_DOCUMENT_BYTES, timeoutMs)) as { issuer?: unknown; jwks_uri?: unknown };
    if (document?.issuer !== this.issuer) throw new Error(`${url} names the issuer ${JSON.stringify(document?.issuer)?.slice(0, 200)}, not ${this.issuer}`);
    if (typeof document.jwks_uri !== 'string' || !document.jwks_uri.startsWith('https://')) throw new Error(`${url} names no https jwks_uri`);
    return document.jwks_uri;
  }
}

export class WorkloadIdentities {
  private rules: readonly WorkloadRule[] = [];
  private issuers = new Map<string, Issuer>();
  private readonly verified = new LRUCache<string, Verified>({ max: VERIFIED_ENTRIES });
  private readonly accounts = new Map<string, { id: string | undefined; until: number }>();

  constructor(
    private readonly store: Pick<AccountStore, 'findAccountByName'>,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** The rules the config gives: tokens verified under other ones are checked again; an issuer kept keeps its keys. */
  configure(rules: readonly WorkloadRule[]): void {
    if (JSON.stringify(rules) === JSON.stringify(this.rules)) return;
    this.rules = rules;
    this.issuers = new Map(rules.map((rule) => [rule.issuer, this.issuers.get(rule.issuer) ?? new Issuer(rule.issuer, this.log, this.now)]));
    this.verified.clear();
  }

  get enabled(): boolean {
    return this.rules.length > 0;
  }

  /** A token verified before (no await: the hot path for a workload's later requests), or the whole check. */
  check(token: string): Checked | Promise<Checked> {
    const digest = sha256Hex(token);
    const known = this.verified.get(digest);
    if (known && known.until > this.now()) return { record: known.record };
    return this.verify(token, digest).then((checked) => {
      if ('refused' in checked) this.log.debug({ reason: checked.refused }, 'workload identity: a token refused');
      return checked;
    });
  }

  private async verify(token: string, digest: string): Promise<Checked> {
    const jose = await import('jose');
    let claimed: JWTPayload;
    try {
      claimed = jose.decodeJwt(token);
    } catch {
      return { refused: 'not a JWT' };
    }
    const issuer = typeof claimed.iss === 'string' ? this.issuers.get(claimed.iss) : undefined;
    if (!issuer) return { refused: 'no rule trusts its issuer' };
    let claims: JWTPayload;
    try {
      claims = await this.verifiedClaims(jose, token, issuer);
    } catch (err) {
      if (err instanceof GatewayError) throw err; // no keys to be had: 503
      return { refused: err instanceof Error ? err.message : 'it cannot be verified' }; // jose's refusals, and a key it cannot use (too short, another kind)
    }
    const subject = claims.sub;
    if (typeof subject !== 'string' || subject.length === 0 || subject.length > MAX_SUBJECT) return { refused: `its subject is missing or longer than ${MAX_SUBJECT}` };
    if (claims.exp! * 1000 > this.now() + MAX_LIFETIME_MS) return { refused: 'its expiry is more than 400 days away' };
    const audiences = typeof claims.aud === 'string' ? [claims.aud] : Array.isArray(claims.aud) ? claims.aud : [];
    const rule = this.rules.find(
      (candidate) =>
        candidate.issuer === issuer.issuer &&
        audiences.includes(candidate.audience) &&
        globMatches(candidate.subject, subject) &&
        Object.entries(candidate.claims).every(([name, value]) => claims[name] === value),
    );
    if (!rule) return { refused: 'no rule of its issuer names its audience, subject and claims' };
    const accountId = await this.accountId(rule.account);
    if (!accountId) {
      this.log.warn({ issuer: rule.issuer, subject, account: rule.account }, 'workload identity: the rule names an account that does not exist; refused');
      return { refused: 'its account does not exist' };
    }
    const expiresAt = (claims.exp! + CLOCK_TOLERANCE_SECONDS) * 1000;
    const record: KeyAuthRecord = {
      id: workloadKeyId(rule.issuer, accountId, subject),
      name: subject,
      digest: '',
      prefix: '',
      createdAt: new Date(this.now()).toISOString(),
      revokedAt: null,
      expiresAt: new Date(expiresAt).toISOString(),
      models: [...rule.models],
      endpoints: [],
      allowedIps: [],
      rateLimit: { ...rule.rateLimit },
      accountId,
      createdBy: rule.issuer,
      quota: NO_QUOTA,
      budget: NO_BUDGET,
    };
    this.verified.set(digest, { record, until: Math.min(expiresAt, this.now() + VERIFIED_MAX_MS) });
    return { record };
  }

  /** The claims of a token the issuer signed, checked; a kid its keys lack fetches them again (once) first. */
  private async verifiedClaims(jose: Jose, token: string, issuer: Issuer): Promise<JWTPayload> {
    const options: JWTVerifyOptions = { issuer: issuer.issuer, algorithms: ALGORITHMS, clockTolerance: CLOCK_TOLERANCE_SECONDS, requiredClaims: ['exp', 'sub'], currentDate: new Date(this.now()) };
    try {
      return (await jose.jwtVerify(token, await issuer.current(), options)).payload;
    } catch (err) {
      if (!(err instanceof jose.errors.JWKSNoMatchingKey) || !(await issuer.refetchForKid())) throw err;
      return (await jose.jwtVerify(token, await issuer.current(), options)).payload;
    }
  }

  /** The account's id by its name, kept ACCOUNT_TTL_MS (a missing one NO_ACCOUNT_TTL_MS). */
  private async accountId(name: string): Promise<string | undefined> {
    const known = this.accounts.get(name);
    if (known && known.until > this.now()) return known.id;
    const account = await this.store.findAccountByName(name);
    this.accounts.set(name, { id: account?.id, until: this.now() + (account ? ACCOUNT_TTL_MS : NO_ACCOUNT_TTL_MS) });
    return account?.id;
  }
}

/**
 * A workload identity's key id: `workload:<tag>:<subject>`, the tag naming its issuer and account
 * (eight hex digits of a digest), so that one subject of two issuers, or of one issuer under two
 * accounts, is two identities: two rate limits, and usage each on its own account.
 */
export function workloadKeyId(issuer: string, accountId: string, subject: string): string {
  return `${WORKLOAD_KEY_PREFIX}${sha256Hex(`${issuer}\n${accountId}`).slice(0, 8)}:${subject}`;
}

/** The subject a workload identity's key id names; undefined for any other id. */
export function workloadSubject(keyId: string): string | undefined {
  return /^workload:[0-9a-f]{8}:/.test(keyId) ? keyId.slice(WORKLOAD_KEY_PREFIX.length + 9) : undefined;
}
