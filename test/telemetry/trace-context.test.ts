import { parseTraceparent, randomHex, traceparentOf } from '../../src/telemetry/trace-context';

test('a valid traceparent is continued', () => {
  expect(parseTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')).toEqual({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', parentId: '00f067aa0ba902b7', flags: '01' });
  expect(parseTraceparent(' 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ')).toEqual({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', parentId: '00f067aa0ba902b7', flags: '00' });
});

test.each([
  undefined,
  '',
  'garbage',
  '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7',
  '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
  '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
  'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01',
  '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra',
])('%p starts a new trace', (header) => {
  expect(parseTraceparent(header)).toBeUndefined();
});

test('a future version may carry more fields', () => {
  expect(parseTraceparent('01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-whatever')).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736' });
});

test('the outgoing header names the gateway span as parent', () => {
  expect(traceparentOf({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16), parentSpanId: 'c'.repeat(16), flags: '01', tracestate: undefined })).toBe(`00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`);
});

test('pooled random ids stay unique and well-formed across pool refills', () => {
  const ids = Array.from({ length: 600 }, () => randomHex(16)); // 9,600 bytes: the 4 KiB pool refills twice
  expect(ids.every((id) => /^[0-9a-f]{32}$/.test(id))).toBe(true);
  expect(new Set(ids).size).toBe(600);
});
