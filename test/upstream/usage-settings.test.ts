/** The `usage` settings: strict, bounded, and 5 s of drain unless the operator says otherwise. */
import { parseConfig } from '../../src/config';

const minimal = { providers: { a: { workers: ['http://x:1'] } } };

test('usage.drainAfterDisconnectMs: 5000 by default, 0 allowed (no drain), a negative, fraction, huge value or unknown field refused', () => {
  expect(parseConfig(minimal).usage).toEqual({ drainAfterDisconnectMs: 5000 });
  expect(parseConfig({ ...minimal, usage: { drainAfterDisconnectMs: 0 } }).usage.drainAfterDisconnectMs).toBe(0);
  for (const bad of [-1, 1.5, 600_001, '100']) expect(() => parseConfig({ ...minimal, usage: { drainAfterDisconnectMs: bad } })).toThrow(/usage\.drainAfterDisconnectMs/);
  expect(() => parseConfig({ ...minimal, usage: { drainAfterDisconnectMS: 100 } })).toThrow(/usage/);
});
