import fc from 'fast-check';
import { JsonBoundsScanner, jsonBoundPassed } from '../../src/pipeline/json-bounds';

const scan = (text: string, depth = 64, values = 1000) => jsonBoundPassed(Buffer.from(text), depth, values);

test('depth: nesting up to the limit passes, one level more does not', () => {
  expect(scan('['.repeat(64) + ']'.repeat(64))).toBeUndefined();
  expect(scan('['.repeat(65) + ']'.repeat(65))).toBe('depth');
  expect(scan(`${'{"a":'.repeat(65)}1${'}'.repeat(65)}`)).toBe('depth');
  expect(scan('[{"a":[{"b":[]}]}]', 4)).toBe('depth');
});

test('values: elements and members are counted, up to the limit', () => {
  expect(scan(`[${Array(1000).fill(1).join(',')}]`, 64, 1000)).toBeUndefined(); // 999 commas and the array
  expect(scan(`[${Array(1001).fill(1).join(',')}]`, 64, 1000)).toBe('values');
  expect(scan(`[${Array(600).fill('[]').join(',')}]`, 64, 1000)).toBe('values');
});

test('brackets, braces and commas inside strings, escaped quotes included, count for nothing', () => {
  expect(scan(JSON.stringify({ content: `${'['.repeat(10_000)},,,,\\"[[[` }), 2, 5)).toBeUndefined();
  expect(scan('["a\\\\", [[[]]]]', 3)).toBe('depth'); // the string ends at the quote after an escaped backslash
});

test('a prompt of 16 MiB of text passes', () => {
  const body = JSON.stringify({ model: 'mock/echo', messages: [{ role: 'user', content: 'x'.repeat(16 * 1024 * 1024 - 100) }] });
  expect(scan(body)).toBeUndefined();
});

test('text that is not JSON passes, for JSON.parse to say where it breaks', () => {
  expect(scan('{"unterminated: [[[[')).toBeUndefined();
});

test('the scan agrees with the parsed structure on any JSON value', () => {
  const depthOf = (value: unknown): number => (typeof value === 'object' && value !== null ? 1 + Math.max(0, ...Object.values(value).map(depthOf)) : 0);
  fc.assert(
    fc.property(fc.jsonValue({ maxDepth: 8 }), (value) => {
      const text = JSON.stringify(value);
      const depth = depthOf(value);
      expect(jsonBoundPassed(Buffer.from(text), depth, 1e9)).toBeUndefined();
      if (depth > 0) expect(jsonBoundPassed(Buffer.from(text), depth - 1, 1e9)).toBe('depth');
    }),
    { numRuns: 500 },
  );
});

test('fed in chunks cut anywhere (inside strings and escapes too), the scan says what it says on the whole', () => {
  fc.assert(
    fc.property(fc.jsonValue({ maxDepth: 8 }), fc.array(fc.nat(), { maxLength: 6 }), fc.nat({ max: 9 }), (value, cuts, depth) => {
      const bytes = Buffer.from(JSON.stringify(value));
      const points = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
      const scanner = new JsonBoundsScanner(depth, 1e9);
      let verdict: string | undefined;
      let from = 0;
      for (const to of [...points, bytes.length]) {
        verdict ??= scanner.feed(bytes.subarray(from, to));
        from = to;
      }
      expect(verdict).toBe(jsonBoundPassed(bytes, depth, 1e9));
    }),
    { numRuns: 1000 },
  );
});

test('a backslash run split across chunks still escapes the quote after it', () => {
  const scanner = new JsonBoundsScanner(1, 100);
  expect(scanner.feed(Buffer.from('["a\\'))).toBeUndefined();
  expect(scanner.feed(Buffer.from('"[[[]]]"]'))).toBeUndefined(); // \" escaped: the brackets are still text
  const odd = new JsonBoundsScanner(1, 100);
  expect(odd.feed(Buffer.from('["a\\\\'))).toBeUndefined();
  expect(odd.feed(Buffer.from('",[[]]]'))).toBe('depth'); // \\ then ": the string ended
});
