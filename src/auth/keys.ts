/**
 * What a key looks like, how one is made, and its digest: the only place that hashes a key.
 * A key is `cgk_` followed by 43 base64url characters (256 random bits). Stores hold only the
 * SHA-256 digest; the clear key is shown once, when it is issued.
 */
import crypto, { randomBytes, timingSafeEqual } from 'node:crypto';

export const KEY_PREFIX = 'cgk_';
const KEY_PATTERN = /^cgk_[A-Za-z0-9_-]{43}$/;
/** Enough of the key to recognise it in a list, far too little to guess the rest (27 chars stay secret). */
const DISPLAY_PREFIX_LENGTH = KEY_PREFIX.length + 12;

export function generateKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

export function looksLikeKey(candidate: string): boolean {
  return KEY_PATTERN.test(candidate);
}

/** Anything in `text` that looks like a key (or most of one) replaced: for client text that is echoed or logged. */
export function withoutKeys(text: string): string {
  return text.replace(KEY_LIKE, `${KEY_PREFIX}[redacted]`);
}
const KEY_LIKE = /cgk_[A-Za-z0-9_-]{8,}/g;

export function digestKey(key: string): string {
  return sha256Hex(key);
}

/** crypto.hash, one call without a Hash object, takes a third of createHash's time; Node < 20.12 lacks it. */
const sha256Hex: (text: string) => string =
  typeof crypto.hash === 'function' ? (text) => crypto.hash('sha256', text, 'hex') : (text) => crypto.createHash('sha256').update(text, 'utf8').digest('hex');

/** Constant time whatever the texts: their digests are compared, so neither content nor length leaks. */
export function sameSecret(offered: string, expected: string): boolean {
  return timingSafeEqual(Buffer.from(sha256Hex(offered), 'hex'), Buffer.from(sha256Hex(expected), 'hex'));
}

export function displayPrefix(key: string): string {
  return key.slice(0, DISPLAY_PREFIX_LENGTH);
}

export function newKeyId(): string {
  return 'key_' + randomBytes(9).toString('base64url');
}
