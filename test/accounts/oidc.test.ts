/**
 * The pure decisions of OIDC sign-in (src/accounts/oidc.ts): the redirect address a request may make,
 * and whether a first sign-in may be linked by its email to a person known here.
 */
import { linkRefusal, redirectOrigin } from '../../src/accounts/oidc';
import type { IdentityRecord } from '../../src/store/types';

const ISSUER = 'https://sso.example.com';
const allowed = new Set(['localhost', '127.0.0.1', 'console.example.com', '::1']);

test('console.publicUrl, when set, is the redirect origin whatever the Host', () => {
  expect(redirectOrigin('https://console.example.com', 'evil.test', allowed)).toBe('https://console.example.com');
  expect(redirectOrigin('https://console.example.com', undefined, allowed)).toBe('https://console.example.com');
});

test('an allowed name makes the origin, on any port and in any case', () => {
  expect(redirectOrigin(undefined, 'localhost', allowed)).toBe('https://localhost');
  expect(redirectOrigin(undefined, 'LOCALHOST:8443', allowed)).toBe('https://localhost:8443');
  expect(redirectOrigin(undefined, 'Console.Example.com.:443', allowed)).toBe('https://console.example.com.:443');
  expect(redirectOrigin(undefined, '127.0.0.1:1', allowed)).toBe('https://127.0.0.1:1');
  expect(redirectOrigin(undefined, '[::1]:8443', allowed)).toBe('https://[::1]:8443');
});

test('any other Host, or one with more than a name and a port, makes none', () => {
  for (const host of [
    undefined,
    '',
    'evil.test',
    'evil.test:443',
    'localhost:1@evil.test',
    'localhost@evil.test',
    'localhost/evil',
    'localhost:8443/x',
    'localhost.evil.test',
    'console.example.com.evil.test',
    '127.0.0.1.nip.io',
    '[::2]',
    '[localhost]',
    'localhost:',
    'localhost:123456',
    'localhost:65536',
    ' localhost',
    'localhost\r\nx: y',
    'xn--lcalhost-9za', // not localhost, whatever it looks like
    'l\u043Ecalhost', // a Cyrillic o
  ]) {
    expect({ host, origin: redirectOrigin(undefined, host, allowed) }).toEqual({ host, origin: undefined });
  }
});

const identity = (issuer: string, subject: string): IdentityRecord => ({ issuer, subject, email: 'kim@x.test', createdAt: '2024-01-01T00:00:00.000Z' });

test('only the boolean email_verified: true links by email', () => {
  expect(linkRefusal({ issuer: ISSUER, emailVerified: true }, [])).toBeUndefined();
  for (const [value, shown] of [
    [undefined, 'missing'],
    [null, 'null'],
    [false, 'false'],
    ['true', '"true"'],
    ['no', '"no"'],
    [1, '1'],
    [{}, '{}'],
    [[true], '[true]'],
  ] as const) {
    expect(linkRefusal({ issuer: ISSUER, emailVerified: value }, [])).toEqual({ reason: expect.stringContaining(`email_verified is ${shown}, not true`), otherSubject: false });
  }
});

test("a person bound to another subject of this issuer is not linked; another issuer's binding does not stop it", () => {
  expect(linkRefusal({ issuer: ISSUER, emailVerified: true }, [identity(ISSUER, 'someone-else')])).toEqual({ reason: expect.stringMatching(/another subject/), otherSubject: true });
  expect(linkRefusal({ issuer: ISSUER, emailVerified: true }, [identity('https://other.example.com', 'x')])).toBeUndefined();
});
