/**
 * What a key looks like, how one is made, and its digest: the only place that hashes a key.
 * A key has the shape common/key-shape.ts gives. Stores hold only the
 * SHA-256 digest; the clear key is shown once, when it is issued.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';

import { BASE62, checksumOf, KEY_BODY_LENGTH, KEY_PREFIX } from '../common/key-shape';
import { sha256Hex } from '../common/sha256';
/** Enough of the key to recognise it in a list, far too little to guess the rest (27 chars stay secret). */
const DISPLAY_PREFIX_LENGTH = KEY_PREFIX.length + 12;

/** A new key: `cgk_`, 43 random base62 characters (256 bits), their 6-character checksum (common/key-shape.ts). */
export function generateKey(): string {
  let body = '';
  while (body.length < KEY_BODY_LENGTH) {
    // Bytes below 248 (4 x 62) map evenly onto the 62 characters; the others are drawn again.
    for (const byte of randomBytes(64)) if (byte < 248 && body.length < KEY_BODY_LENGTH) body += BASE62[byte % 62];
  }
  return KEY_PREFIX + body + checksumOf(body);
}

export function digestKey(key: string): string {
  return sha256Hex(key);
}

/** Constant time whatever the texts: their digests are compared, so neither content nor length leaks. */
export function sameSecret(offered: string, expected: string): boolean {
  return timingSafeEqual(Buffer.from(sha256Hex(offered), 'hex'), Buffer.from(sha256Hex(expected), 'hex'));
}

export function displayPrefix(key: string): string {
  return key.slice(0, DISPLAY_PREFIX_LENGTH);
}

export function newKeyId(): string {
  return `key_${randomBytes(9).toString('base64url')}`;
}
