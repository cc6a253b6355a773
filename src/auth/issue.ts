/** Issuing a key: generate it, keep only its digest in the store, hand the clear key back once. */
import { digestKey, displayPrefix, generateKey, newKeyId } from './keys';
import { defaultAccountId } from '../store/default-account';
import { NO_BUDGET, NO_OWN_LIMITS, NO_QUOTA, NO_USAGE, type Budget, type KeyLimits, type KeyRecord, type KeyStore, type Quota, type Store } from '../store/types';

export interface NewKey {
  name: string;
  models?: string[];
  endpoints?: string[];
  allowedIps?: string[];
  expiresAt?: Date | null;
  rateLimit?: Partial<KeyLimits>;
  quota?: Partial<Quota>;
  budget?: Partial<Budget>;
  /** The owning account; absent: `default`. */
  accountId?: string;
  /** A person's email, or `admin-token` (the default: the CLI and the admin API act with it). */
  createdBy?: string;
}

export async function issueKey(store: Store, input: NewKey, now = new Date()): Promise<{ key: string; record: KeyRecord }> {
  const accountId = input.accountId ?? (await defaultAccountId(store, now));
  const key = generateKey();
  const record: KeyRecord = {
    id: newKeyId(),
    name: input.name,
    digest: digestKey(key),
    prefix: displayPrefix(key),
    createdAt: now.toISOString(),
    revokedAt: null,
    expiresAt: input.expiresAt ? input.expiresAt.toISOString() : null,
    models: input.models ?? [],
    endpoints: input.endpoints ?? [],
    allowedIps: input.allowedIps ?? [],
    lastUsedAt: null,
    rateLimit: { ...NO_OWN_LIMITS, ...input.rateLimit },
    usage: { ...NO_USAGE },
    accountId,
    createdBy: input.createdBy ?? 'admin-token',
    quota: { ...NO_QUOTA, ...input.quota },
    budget: { ...NO_BUDGET, ...input.budget },
  };
  await store.insert(record);
  return { key, record };
}

/** The longest grace a rotation may give the secret it replaces: 7 days. */
export const MAX_GRACE_SECONDS = 7 * 86_400;

/**
 * A new secret for an existing key: same id and settings. The old secret stops working at once, or
 * `graceSeconds` later (then a secret still in an earlier rotation's grace stops at once).
 */
export async function rotateKey(store: KeyStore, id: string, graceSeconds = 0, now = new Date()): Promise<{ key: string; record: KeyRecord } | undefined> {
  const key = generateKey();
  const graceUntil = graceSeconds > 0 ? new Date(now.getTime() + graceSeconds * 1000) : undefined;
  const record = await store.rotate(id, digestKey(key), displayPrefix(key), graceUntil);
  return record ? { key, record } : undefined;
}

/**
 * A record as it may be shown to people and scripts: everything but the digest, and
 * `previousKeyExpiresAt` (when the secret a rotation replaced stops working; null: none works).
 */
export function publicView(record: KeyRecord, now = Date.now()) {
  const { digest: _digest, previousKeyExpiresAt, ...shown } = record;
  return { ...shown, previousKeyExpiresAt: previousKeyExpiresAt && Date.parse(previousKeyExpiresAt) > now ? previousKeyExpiresAt : null };
}
