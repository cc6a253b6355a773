import { createHash } from 'node:crypto';
import { digestKey, displayPrefix, generateKey, newKeyId, sameSecret } from '../../src/auth/keys';
import { looksLikeKey, withoutKeys } from '../../src/common/key-shape';

test('keys have the cgk_ prefix and 43 base64url characters, and do not repeat', () => {
  const keys = Array.from({ length: 1000 }, generateKey);
  for (const key of keys) expect(key).toMatch(/^cgk_[A-Za-z0-9_-]{43}$/);
  expect(new Set(keys).size).toBe(1000);
});

test('generated keys use the whole base64url alphabet (they are random, not a counter)', () => {
  const seen = new Set(Array.from({ length: 200 }, generateKey).flatMap((key) => [...key.slice(4)]));
  expect(seen.size).toBe(64);
});

test('looksLikeKey accepts generated keys and refuses near misses', () => {
  const key = generateKey();
  expect(looksLikeKey(key)).toBe(true);
  const misses = [
    key.slice(0, -1), // 42 characters
    key + 'x', // 44
    key.replace('cgk_', 'cgx_'),
    key.replace('cgk_', 'CGK_'),
    key.slice(4), // no prefix
    key.slice(0, -1) + '=',
    key.slice(0, -1) + '+',
    key.slice(0, -1) + '/',
    key.slice(0, -1) + '.',
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
});

test('sameSecret: equal texts only, whatever their lengths', () => {
  expect(sameSecret('admin-token-1', 'admin-token-1')).toBe(true);
  expect(sameSecret('admin-token-2', 'admin-token-1')).toBe(false);
  expect(sameSecret('admin-token-1x', 'admin-token-1')).toBe(false);
  expect(sameSecret('', 'admin-token-1')).toBe(false);
});
