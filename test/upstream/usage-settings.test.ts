/** The `usage` settings: strict, bounded, 5 s of drain, 400 days kept and 10,000 ledger pairs a key and day unless the operator says otherwise. */
import { parseConfig } from '../../src/config';

const minimal = { providers: { a: { workers: ['http://x:1'] } } };

test('usage.drainAfterDisconnectMs: 5000 by default, 0 allowed (no drain), a negative, fraction, huge value or unknown field refused', () => {
  expect(parseConfig(minimal).usage).toEqual({ drainAfterDisconnectMs: 5000, retentionDays: 400, maxPairsPerKeyDay: 10_000 });
  expect(parseConfig({ ...minimal, usage: { drainAfterDisconnectMs: 0 } }).usage.drainAfterDisconnectMs).toBe(0);
  for (const bad of [-1, 1.5, 600_001, '100']) expect(() => parseConfig({ ...minimal, usage: { drainAfterDisconnectMs: bad } })).toThrow(/usage\.drainAfterDisconnectMs/);
  expect(() => parseConfig({ ...minimal, usage: { drainAfterDisconnectMS: 100 } })).toThrow(/usage/);
});

test('usage.retentionDays: 62 to 3650 (a month quota starts from its usage); usage.maxPairsPerKeyDay: 1 to 1,000,000', () => {
  expect(parseConfig({ ...minimal, usage: { retentionDays: 62, maxPairsPerKeyDay: 1 } }).usage).toMatchObject({ retentionDays: 62, maxPairsPerKeyDay: 1 });
  for (const bad of [61, 3651, 90.5, '400']) expect(() => parseConfig({ ...minimal, usage: { retentionDays: bad } })).toThrow(/usage\.retentionDays/);
  for (const bad of [0, 1_000_001, 2.5, null]) expect(() => parseConfig({ ...minimal, usage: { maxPairsPerKeyDay: bad } })).toThrow(/usage\.maxPairsPerKeyDay/);
});
