/**
 * An account's key policy: the longest its keys may live, in days from their creation. A key made
 * without an expiry gets the longest the policy allows; one asked to live longer, or an edit that
 * would make a key live longer or for ever, is refused (400, param expiresAt). Keys made before the
 * policy keep their expiry (or none): the policy speaks for keys made or changed under it.
 */
import { errors } from '../errors';
import type { KeyPolicy } from '../store/types';

const DAY_MS = 86_400_000;
/** The most a policy may say: about ten years. */
export const MAX_LIFETIME_DAYS = 3650;

/**
 * The expiry a key made at `createdAt` gets under the policy: `requested` (ISO, or null/undefined for
 * none) when it is within the policy, the longest allowed when none was asked for on creation. An
 * edit (`current`: the key's expiry now) may always bring an expiry closer, and may give a key made
 * before the policy (no expiry, or one past its creation's bound) one within the policy from now.
 */
export function expiryUnderPolicy(policy: KeyPolicy | undefined, requested: string | null | undefined, createdAt: Date, creating: boolean, current: string | null = null, now = new Date()): string | null | undefined {
  if (!policy) return requested;
  const span = policy.maxLifetimeDays * DAY_MS;
  const bound = createdAt.getTime() + span;
  const latest = new Date(creating ? bound : Math.max(bound, current === null ? now.getTime() + span : Date.parse(current)));
  const allowed = `no later than ${latest.toISOString()} (the account's key policy: ${policy.maxLifetimeDays} days)`;
  if (requested === null || (requested === undefined && creating)) {
    if (creating) return latest.toISOString();
    throw errors.invalidBody('expiresAt', `'expiresAt' cannot be removed: keys of this account expire, ${allowed}.`);
  }
  if (requested === undefined) return undefined;
  if (Date.parse(requested) > latest.getTime()) throw errors.invalidBody('expiresAt', `'expiresAt' must be ${allowed}.`);
  return requested;
}

/** A policy as the admin API takes it: `{maxLifetimeDays}` (a whole number of days, 1 to 3650), or null for none. */
export function keyPolicyField(value: unknown): KeyPolicy | null | undefined {
  if (value === undefined || value === null) return value;
  if (typeof value !== 'object' || Array.isArray(value)) throw errors.invalidBody('keyPolicy', `'keyPolicy' must be {"maxLifetimeDays": days}, or null for none.`);
  const { maxLifetimeDays, ...rest } = value as Record<string, unknown>;
  const unknown = Object.keys(rest)[0];
  if (unknown !== undefined) throw errors.invalidBody(`keyPolicy.${unknown.slice(0, 100)}`, `'keyPolicy' takes maxLifetimeDays only.`);
  if (typeof maxLifetimeDays !== 'number' || !Number.isInteger(maxLifetimeDays) || maxLifetimeDays < 1 || maxLifetimeDays > MAX_LIFETIME_DAYS) {
    throw errors.invalidBody('keyPolicy.maxLifetimeDays', `'keyPolicy.maxLifetimeDays' must be a whole number of days from 1 to ${MAX_LIFETIME_DAYS}, or keyPolicy null for none.`);
  }
  return { maxLifetimeDays };
}
