import { createHash, randomBytes } from 'node:crypto';
import zlib from 'node:zlib';
import { digestKey, displayPrefix, generateKey, newKeyId, sameSecret } from '../../src/auth/keys';
import { BASE62, checksumOf, keyForm, looksLikeKey, withoutKeys } from '../../src/common/key-shape';

test('keys have the cgk_ prefix, 43 random base62 characters and a 6-character checksum, and do not repeat', () => {
  const keys = Array.from({ length: 1000 }, generateKey);
  for (const key of keys) expect(key).toMatch(/^cgk_[A-Za-z0-9]{49}$/);
  expect(new Set(keys).size).toBe(1000);
});

test('generated keys use the whole base62 alphabet, evenly (random, not a counter, no modulo bias)', () => {
  const keys = Array.from({ length: 2000 }, generateKey);
  const counts = new Map<string, number>();
  for (const key of keys) for (const c of key.slice(4, 47)) counts.set(c, (counts.get(c) ?? 0) + 1);
  expect(counts.size).toBe(62);
  // 86,000 characters over 62: about 1,387 each (5 standard deviations either side allowed); a biased
  // draw (every byte kept, modulo 62) would give 0-7 a quarter more than the rest, about 1,700.
  for (const [c, n] of counts) expect({ c, fair: n > 1200 && n < 1580 }).toEqual({ c, fair: true });
});

test("the checksum is the body's CRC32 (zlib's, as GitHub's tokens) in 6 base62 characters, zero-padded", () => {
  const base62 = (n: number) => {
    let out = '';
    for (let i = 0; i < 6; i++) {
      out = BASE62[n % 62]! + out;
      n = Math.floor(n / 62);
    }
    return out;
  };
  for (let i = 0; i < 500; i++) {
    const body = [...randomBytes(43)].map((b) => BASE62[b % 62]).join('');
    expect(checksumOf(body)).toBe(base62(zlib.crc32(body)));
  }
  expect(checksumOf('')).toBe('000000'); // CRC32 of nothing is 0
  const key = generateKey();
  expect(key.slice(47)).toBe(checksumOf(key.slice(4, 47)));
});

test('keyForm: a generated key holds; any one character changed, or two swapped, does not; the old form still counts as a key', () => {
  const key = generateKey();
  expect(keyForm(key)).toBe('checksummed');
  for (let at = 4; at < key.length; at++) {
    const other = BASE62[(BASE62.indexOf(key[at]!) + 1 + (at % 61)) % 62]!;
    const changed = key.slice(0, at) + other + key.slice(at + 1);
    expect({ at, form: keyForm(changed), looks: looksLikeKey(changed) }).toEqual({ at, form: 'bad-checksum', looks: false });
  }
  for (let at = 4; at < 46; at++) {
    if (key[at] === key[at + 1]) continue;
    const swapped = key.slice(0, at) + key[at + 1] + key[at] + key.slice(at + 2);
    expect({ at, form: keyForm(swapped) }).toEqual({ at, form: 'bad-checksum' });
  }
  const legacy = `cgk_${randomBytes(32).toString('base64url')}`;
  expect([keyForm(legacy), looksLikeKey(legacy)]).toEqual(['legacy', true]);
  expect(keyForm('sk-proj-abc')).toBe('not-a-key');
  expect(keyForm(`cgk_${'A'.repeat(49)}`)).toBe('bad-checksum');
});

test('looksLikeKey accepts generated keys and refuses near misses', () => {
  const key = generateKey();
  expect(looksLikeKey(key)).toBe(true);
  const misses = [
    key.slice(0, -1), // 42 characters
    `${key}x`, // 44
    key.replace('cgk_', 'cgx_'),
    key.replace('cgk_', 'CGK_'),
    key.slice(4), // no prefix
    `${key.slice(0, -1)}=`,
    `${key.slice(0, -1)}+`,
    `${key.slice(0, -1)}/`,
    `${key.slice(0, -1)}.`,
    ` ${key}`,
    `${key}\n`,
    `cgk_${'a'.repeat(42)}é`,
    '',
    'cgk_',
    'sk-abc',
  ];
  for (const miss of misses) expect([miss, looksLikeKey(miss)]).toEqual([miss, false]);
});

test('the digest is SHA-256 of the key in lower-case hex', () => {
  for (const key of [generateKey(), generateKey(), 'not-a-key', '', 'ünï']) {
    expect(digestKey(key)).toBe(createHash('sha256').update(Buffer.from(key, 'utf8')).digest('hex'));
  }
  expect(digestKey('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  expect(digestKey(generateKey())).not.toBe(digestKey(generateKey()));
});

test('the display prefix is a short start of the key that leaves most of it secret', () => {
  const key = generateKey();
  const prefix = displayPrefix(key);
  expect(key.startsWith(prefix)).toBe(true);
  expect(prefix.startsWith('cgk_')).toBe(true);
  expect(prefix.length).toBeGreaterThan('cgk_'.length);
  expect(prefix.length).toBeLessThanOrEqual(key.length / 2);
  expect(key.length - prefix.length).toBeGreaterThanOrEqual(27); // at least 160 secret bits stay hidden
  expect(displayPrefix(generateKey()).length).toBe(prefix.length);
});

test('key ids are distinct and do not look like keys', () => {
  const ids = Array.from({ length: 1000 }, newKeyId);
  expect(new Set(ids).size).toBe(1000);
  for (const id of ids) {
    expect(id).toMatch(/^key_[A-Za-z0-9_-]+$/);
    expect(looksLikeKey(id)).toBe(false);
  }
});

test('withoutKeys hides whole and partial keys in client text, and leaves the rest alone', () => {
  const key = generateKey();
  expect(withoutKeys(`model ${key}/m and ${key.slice(0, 20)}`)).toBe('model cgk_[redacted]/m and cgk_[redacted]');
  expect(withoutKeys('mock/echo cgk_short')).toBe('mock/echo cgk_short');
  // A client token too, dots and all.
  expect(withoutKeys('model cgt_20261129.eyJwIjoiYWJj.QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVowMTIzNDU2Nzg5')).toBe('model cgt_[redacted]');
});

test('sameSecret: equal texts only, whatever their lengths', () => {
  expect(sameSecret('admin-token-1', 'admin-token-1')).toBe(true);
  expect(sameSecret('admin-token-2', 'admin-token-1')).toBe(false);
  expect(sameSecret('admin-token-1x', 'admin-token-1')).toBe(false);
  expect(sameSecret('', 'admin-token-1')).toBe(false);
});
