/**
 * What a chatgate key looks like: `cgk_` followed by 43 base64url characters (256 random bits).
 * Knowing the shape lets any part keep keys out of what it echoes, logs or passes on, without
 * knowing how keys are made or checked (that is auth/keys.ts).
 */
export const KEY_PREFIX = 'cgk_';
const KEY_PATTERN = /^cgk_[A-Za-z0-9_-]{43}$/;
const KEY_LIKE = /cgk_[A-Za-z0-9_-]{8,}/g;
const HOLDS_KEY = /cgk_[A-Za-z0-9_-]{8,}/;

export function looksLikeKey(candidate: string): boolean {
  return KEY_PATTERN.test(candidate);
}

/** Whether `text` holds anything that looks like a key (or most of one). */
export function holdsKey(text: string): boolean {
  return text.includes(KEY_PREFIX) && HOLDS_KEY.test(text);
}

/** Anything in `text` that looks like a key (or most of one) replaced: for client text that is echoed or logged. */
export function withoutKeys(text: string): string {
  return text.replace(KEY_LIKE, `${KEY_PREFIX}[redacted]`);
}
