import { NO_BUDGET, NO_OWN_LIMITS, NO_QUOTA, NO_USAGE, type KeyRecord, type KeyLimits } from '../../src/store/types';

/** A stored key as the stages see it, for tests that need one without a store. */
export function keyRecord(rateLimit: KeyLimits = NO_OWN_LIMITS): KeyRecord {
  return {
    id: 'key_1',
    name: 'k',
    digest: 'd',
    prefix: 'p',
    createdAt: '2026-01-01T00:00:00.000Z',
    revokedAt: null,
    expiresAt: null,
    models: [],
    endpoints: [],
    allowedIps: [],
    lastUsedAt: null,
    rateLimit,
    usage: NO_USAGE,
    accountId: 'acc_default',
    createdBy: 'admin-token',
    quota: NO_QUOTA,
    budget: NO_BUDGET,
  };
}
