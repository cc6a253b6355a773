/**
 * The email a person is keyed by: ASCII letters lower-cased, nothing else changed, so a look-alike
 * (the Kelvin sign, full-width letters) never becomes the address it imitates.
 */
import { isNfkcStable, normalizeEmail } from '../../src/accounts/emails';

test('ASCII letters are lower-cased and the ends trimmed', () => {
  expect(normalizeEmail('  Alice@Example.COM ')).toBe('alice@example.com');
  expect(normalizeEmail('bob+tag@example.com')).toBe('bob+tag@example.com');
});

test('no Unicode lower-casing: the Kelvin sign stays a Kelvin sign, and so do other non-ASCII capitals', () => {
  expect('\u212Aim@x.test'.toLowerCase()).toBe('kim@x.test'); // what String#toLowerCase would have done
  expect(normalizeEmail('\u212Aim@x.test')).toBe('\u212Aim@x.test');
  expect(normalizeEmail('\u212AIM@X.TEST')).toBe('\u212Aim@x.test');
  expect(normalizeEmail('\u212Aim@x.test')).not.toBe(normalizeEmail('kim@x.test'));
  expect(normalizeEmail('\u00C9mile@x.test')).toBe('\u00C9mile@x.test'); // É
  expect(normalizeEmail('\u0130rem@x.test')).toBe('\u0130rem@x.test'); // İ, whose toLowerCase is two code points
  expect(normalizeEmail('\uFF2Bim@x.test')).toBe('\uFF2Bim@x.test'); // full-width K
});

test('what is not an email is refused', () => {
  for (const value of [undefined, null, 42, {}, ['a@b'], '', 'no-at-sign', 'two@@x', 'a b@x.test', 'a@x.test\u0000', `${'a'.repeat(250)}@x.test`]) {
    expect(normalizeEmail(value)).toBeUndefined();
  }
});

test('NFKC stability: a look-alike changes under NFKC, a plain or precomposed address does not', () => {
  expect(isNfkcStable('kim@x.test')).toBe(true);
  expect(isNfkcStable('\u00E9mile@x.test')).toBe(true); // é precomposed (NFC)
  expect(isNfkcStable('\u212Aim@x.test')).toBe(false); // Kelvin sign -> K
  expect(isNfkcStable('\uFF2Bim@x.test')).toBe(false); // full-width K -> K
  expect(isNfkcStable('\uFB01le@x.test')).toBe(false); // the fi ligature
  expect(isNfkcStable('e\u0301mile@x.test')).toBe(false); // e + combining acute composes
});
