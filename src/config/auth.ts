/**
 * Credentials' sections: the key cache and workload identities (`auth`), the short-lived client
 * tokens and the web pages that may use them (`clientTokens`), and leak reports that revoke
 * (`secretScanning`).
 */
import { createPublicKey } from 'node:crypto';
import { z } from 'zod';
import { count, milliseconds } from './parts';

/** A rule's limit: a whole number (0: no limit) or null (the configured default), as a key's. */
const ruleLimit = z.number().int().min(0).max(2_147_483_647).nullable().default(null);

/**
 * `auth.workloadIdentity`: issuers whose JWTs authenticate as an account (auth/workload-identity.ts).
 * `subject` is a glob (`*` any run of characters, `?` one) over the token's `sub`, whose part before
 * its first wildcard names at least two levels (two `:` or `/`): with a shared issuer (GitHub's,
 * GitLab's), `repo:*` or `repo:acme*` would let in every repository, or another owner's whose name
 * starts alike. `claims`: other claims the token must carry with exactly these values
 * (`repository_owner_id`, which a renamed or re-registered owner cannot take over).
 */
const subjectGlob = z
  .string()
  .min(1)
  .max(255)
  .refine((glob) => {
    const wildcard = glob.search(/[*?]/);
    return wildcard === -1 || (glob.slice(0, wildcard).match(/[:/]/g) ?? []).length >= 2;
  }, "must name whose workloads: before its first * or ?, at least two levels (two ':' or '/'), as 'repo:my-org/*' or 'system:serviceaccount:ci:*'");

export const workloadIdentity = z
  .array(
    z.strictObject({
      issuer: z
        .url({ protocol: /^https$/, error: "must be an https:// URL, exactly as the tokens' iss claim" })
        .refine((value) => !value.includes('?') && !value.includes('#'), 'must have no query or fragment (OpenID Connect Discovery)'),
      audience: z.string().min(1).max(512),
      subject: subjectGlob,
      account: z.string().min(1).max(200),
      claims: z.record(z.string().min(1).max(100), z.union([z.string().max(1000), z.number(), z.boolean()])).default({}),
      models: z.array(z.string().min(1).max(256)).max(100).default([]),
      rateLimit: z.strictObject({ requestsPerMinute: ruleLimit, tokensPerMinute: ruleLimit, maxConcurrent: ruleLimit }).prefault({}),
    }),
  )
  .max(100)
  .default([]);

export const authSection = z
  .strictObject({
    cacheSize: count.default(10_000),
    /** How long a cached key is trusted while the store's change feed is down (or the store has none). */
    cacheTtlMs: milliseconds.default(30_000),
    /** How long a cached key is trusted while the change feed is live (every change drops it at once): the safety net. */
    cacheMaxAgeMs: milliseconds.default(3_600_000),
    /** While the key store cannot be reached, a known key is still served this long after the store last confirmed it. */
    maxStaleMs: milliseconds.default(3_600_000),
    negativeCacheSize: count.default(10_000),
    negativeCacheTtlMs: milliseconds.default(5_000),
    createFirstKey: z.boolean().default(true),
    lastUsedFlushMs: milliseconds.default(10_000),
    workloadIdentity,
  })
  .prefault({});

/** A PEM public key, refused at start when it is not one (it verifies leak reports). */
const publicKeyPem = z.string().refine(
  (pem) => {
    if (!pem.trimStart().startsWith('-----BEGIN PUBLIC KEY-----')) return false; // a private key pasted here is not taken
    try {
      const key = createPublicKey(pem);
      return key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1';
    } catch {
      return false;
    }
  },
  { message: 'must be a PEM public key (-----BEGIN PUBLIC KEY-----) on the P-256 curve, as GitHub signs with ECDSA P-256' },
);

/**
 * `secretScanning`: leak reports that revoke. `github.publicKeys` are the keys GitHub's secret
 * scanning signs its reports with; `github.keysUrl`, where GitHub publishes them
 * (https://api.github.com/meta/public_keys/secret_scanning), fetched and kept current. With either,
 * POST /secret-scanning/github takes reports signed by one of them.
 */
export const secretScanningSection = z
  .strictObject({
    github: z
      .strictObject({
        publicKeys: z
          .array(z.strictObject({ identifier: z.string().min(1).max(200), key: publicKeyPem }))
          .refine((keys) => new Set(keys.map((k) => k.identifier)).size === keys.length, { message: 'each identifier may be listed once' })
          .default([]),
        keysUrl: z
          .url({ protocol: /^https$/, error: 'must be an https:// URL, such as https://api.github.com/meta/public_keys/secret_scanning' })
          .optional(),
      })
      .prefault({}),
  })
  .prefault({});

/** An origin as a browser sends it: scheme, host and any port, nothing after. */
const origin = z.string().refine((value) => {
  try {
    return /^https?:$/.test(new URL(value).protocol) && new URL(value).origin === value;
  } catch {
    return false;
  }
}, 'must be an origin as browsers send it: http(s)://host[:port], lower case, no path or trailing slash');

/**
 * `clientTokens`: short-lived tokens a key mints for code on people's devices (POST /v1/client-tokens,
 * auth/client-tokens.ts). `allowedOrigins`: the web pages (origins) whose scripts may call the model
 * endpoints (CORS); none by default. `enabled: false` refuses `cgt_` tokens and the mint.
 */
export const clientTokensSection = z.strictObject({ enabled: z.boolean().default(true), allowedOrigins: z.array(origin).max(100).default([]) }).prefault({});
