import { parseAuthorization } from '../../src/auth/credentials';

const KEY = 'cgk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde';
const base64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const basic = (userPass: string) => `Basic ${base64(userPass)}`;

describe('parseAuthorization', () => {
  test.each([undefined, '', '   ', '\t', ' \t '])('%p is missing', (header) => {
    expect(parseAuthorization(header)).toEqual({ ok: false, problem: 'missing' });
  });

  test('Bearer and Basic carry the same key', () => {
    expect(parseAuthorization(`Bearer ${KEY}`)).toEqual({ ok: true, key: KEY, scheme: 'bearer' });
    expect(parseAuthorization(basic(`${KEY}:`))).toEqual({ ok: true, key: KEY, scheme: 'basic' });
  });

  test('any b64token is a key here (whether the store knows it is decided later)', () => {
    for (const key of ['sk-abc', 'a.b~c+d/e', 'abc==']) {
      expect(parseAuthorization(`Bearer ${key}`)).toEqual({ ok: true, key, scheme: 'bearer' });
      expect(parseAuthorization(basic(`${key}:`))).toEqual({ ok: true, key, scheme: 'basic' });
    }
  });

  test.each(['bearer', 'BEARER', 'BeArEr'])('scheme %s is case-insensitive', (scheme) => {
    expect(parseAuthorization(`${scheme} ${KEY}`)).toEqual({ ok: true, key: KEY, scheme: 'bearer' });
  });

  test.each(['basic', 'BASIC', 'bAsIc'])('scheme %s is case-insensitive', (scheme) => {
    expect(parseAuthorization(`${scheme} ${base64(`${KEY}:`)}`)).toEqual({ ok: true, key: KEY, scheme: 'basic' });
  });

  test('extra white space (spaces, tabs) around the credentials is tolerated', () => {
    expect(parseAuthorization(`  Bearer    ${KEY}  `)).toEqual({ ok: true, key: KEY, scheme: 'bearer' });
    expect(parseAuthorization(`Bearer\t${KEY}`)).toEqual({ ok: true, key: KEY, scheme: 'bearer' });
    expect(parseAuthorization(`Basic  ${base64(`${KEY}:`)} `)).toEqual({ ok: true, key: KEY, scheme: 'basic' });
  });

  test.each([
    ['an unknown scheme', `Token ${KEY}`],
    ['a scheme glued to the key', `Bearer${KEY}`],
    ['a scheme alone', 'Bearer'],
    ['Bearer with an empty key', 'Bearer   '],
    ['a key with a space', `Bearer ${KEY} extra`],
    ['a key with a quote', 'Bearer abc"def'],
    ['a key with a colon', 'Bearer a:b'],
    ['a key with a non-ASCII letter', 'Bearer cgk_ünï'],
    ['a key with = inside', 'Bearer ab=cd'],
    ['Basic with nothing', 'Basic '],
    ['Basic with bad base64', 'Basic %%%'],
    ['Basic with base64 of the wrong length', 'Basic abc'],
    ['Basic with base64url characters', `Basic ${base64(`${KEY}:`).replace(/\+/g, '-').replace(/\//g, '_')}_-`],
    ['Basic without a colon', basic(KEY)],
    ['Basic with a password', basic(`${KEY}:secret`)],
    ['Basic with the key as password', basic(`someone:${KEY}`)],
    ['Basic with an empty user', basic(':')],
    ['Basic whose user has a space', basic('has space:')],
    ['Basic whose user has a colon', basic('a:b:')],
    ['Basic that is not UTF-8', `Basic ${Buffer.from([0xff, 0xfe, 0x3a]).toString('base64')}`],
  ])('%s is malformed, and the reason quotes nothing of the header', (_name, header) => {
    const result = parseAuthorization(header);
    expect(result).toEqual({ ok: false, problem: 'malformed', reason: expect.any(String) });
    const reason = (result as { reason: string }).reason;
    expect(reason.length).toBeGreaterThan(5);
    expect(reason).not.toContain(KEY);
    expect(reason).not.toContain('secret');
    const credentials = header.trim().split(/[ \t]+/).slice(1).join(' ');
    if (credentials.length > 2) expect(reason).not.toContain(credentials);
    if (header.startsWith('Basic ') && credentials !== '') {
      const decoded = Buffer.from(credentials, 'base64').toString('utf8');
      for (const part of decoded.split(':')) if (part.length > 2) expect(reason).not.toContain(part);
    }
  });

  test('the reasons say what is wrong, differently for different faults', () => {
    const reasonOf = (header: string) => (parseAuthorization(header) as { reason: string }).reason;
    const reasons = new Set([
      reasonOf(`Token ${KEY}`),
      reasonOf('Bearer'),
      reasonOf('Basic %%%'),
      reasonOf(basic(KEY)),
      reasonOf(basic(`${KEY}:secret`)),
      reasonOf('Bearer abc"def'),
    ]);
    expect(reasons.size).toBe(6);
  });
});
