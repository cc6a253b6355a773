/**
 * What a chatgate key looks like. Made today: `cgk_`, 43 base62 characters (256 random bits), then
 * 6 base62 characters of checksum: the CRC32 of those 43 characters, in base62 (0-9, A-Z, a-z),
 * left-padded with `0` (GitHub's token scheme). 53 characters in all, letters and digits only after
 * the prefix, so a double click selects all of it. The checksum lets a scanner confirm a key offline
 * and the gateway refuse a made-up or mistyped one without asking its store. Keys made before it
 * (`cgk_` and 43 base64url characters, no checksum) keep working.
 *
 * Knowing the shape lets any part keep keys out of what it echoes, logs or passes on, without
 * knowing how keys are made or checked (that is auth/keys.ts).
 */
export const KEY_PREFIX = 'cgk_';
/** A client token's (auth/client-tokens.ts): redacted like a key wherever client text is echoed, logged or forwarded. */
export const CLIENT_TOKEN_PREFIX = 'cgt_';
/** The random part's length, and the checksum's. */
export const KEY_BODY_LENGTH = 43;
export const KEY_CHECKSUM_LENGTH = 6;
const CHECKSUMMED = /^cgk_[0-9A-Za-z]{49}$/;
const LEGACY = /^cgk_[A-Za-z0-9_-]{43}$/;
/** A key, or a client token (`cgt_`, auth/client-tokens.ts: its dots included), whole or in part. */
const KEY_LIKE = /cg([kt])_[A-Za-z0-9_.-]{8,}/g;
const HOLDS_KEY = /cg[kt]_[A-Za-z0-9_.-]{8,}/;
export const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

export type KeyForm = 'checksummed' | 'legacy' | 'bad-checksum' | 'not-a-key';

/** What a string is: a key of today's form with a good checksum, one of the old form, one of today's shape whose checksum is wrong, or none. */
export function keyForm(candidate: string): KeyForm {
  if (CHECKSUMMED.test(candidate)) {
    const body = candidate.slice(KEY_PREFIX.length, KEY_PREFIX.length + KEY_BODY_LENGTH);
    return candidate.endsWith(checksumOf(body)) ? 'checksummed' : 'bad-checksum';
  }
  return LEGACY.test(candidate) ? 'legacy' : 'not-a-key';
}

/** Whether a store lookup could find this key: a checksummed one whose checksum holds, or one of the old form. */
export function looksLikeKey(candidate: string): boolean {
  const form = keyForm(candidate);
  return form === 'checksummed' || form === 'legacy';
}

/** The 6-character base62 CRC32 of a key's random part. */
export function checksumOf(body: string): string {
  let crc = crc32(body);
  let out = '';
  for (let i = 0; i < KEY_CHECKSUM_LENGTH; i++) {
    out = BASE62[crc % 62]! + out;
    crc = Math.floor(crc / 62);
  }
  return out;
}

let table: Uint32Array | undefined;
/** CRC-32 (IEEE 802.3, as zlib and GitHub's tokens use) of an ASCII string, unsigned. */
function crc32(text: string): number {
  if (!table) {
    table = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      table[n] = c >>> 0;
    }
  }
  let crc = 0xffffffff;
  for (let i = 0; i < text.length; i++) crc = table[(crc ^ text.charCodeAt(i)) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** Whether `text` holds anything that looks like a key (or most of one). */
export function holdsKey(text: string): boolean {
  return (text.includes(KEY_PREFIX) || text.includes(CLIENT_TOKEN_PREFIX)) && HOLDS_KEY.test(text);
}

/** Anything in `text` that looks like a key (or most of one) replaced: for client text that is echoed or logged. */
export function withoutKeys(text: string): string {
  return text.replace(KEY_LIKE, (_whole, kind: string) => `cg${kind}_[redacted]`);
}
