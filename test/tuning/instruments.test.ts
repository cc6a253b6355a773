/**
 * Our counter and histogram families against prom-client's own instruments: the same observations
 * give the same exposition, byte for byte, alone and aggregated across a cluster's processes.
 */
import { AggregatorRegistry, Counter, Histogram, Registry } from 'prom-client';
import { CounterFamily, HistogramFamily } from '../../src/tuning/instruments';

const BUCKETS = [0.005, 0.01, 0.1, 1, 2.5];
const OBSERVATIONS: Array<[string, number]> = [
  ['openai', 0.004],
  ['openai', 0.005], // on a bound: counted in that bucket
  ['vllm', 0.05],
  ['openai', 3], // above every bound: +Inf only
  ['vllm', 0],
  ['with "quotes" and \\ and \n', 0.2],
];
const COUNTS: Array<[{ provider: string; status: string }, number]> = [
  [{ provider: 'openai', status: '200' }, 1],
  [{ provider: 'openai', status: '500' }, 2],
  [{ provider: 'vllm', status: '200' }, 0.5],
  [{ provider: 'openai', status: '200' }, 3],
];

function ours(): Registry {
  const registry = new Registry();
  const registers = [registry];
  const histogram = new HistogramFamily({ name: 'x_seconds', help: 'A histogram.', labelNames: ['provider'] as const, buckets: BUCKETS, registers });
  const counter = new CounterFamily({ name: 'x_total', help: 'A counter.', labelNames: ['provider', 'status'] as const, registers });
  const plain = new CounterFamily({ name: 'x_plain_total', help: 'Unlabelled.', labelNames: [], registers }).series({});
  for (const [provider, value] of OBSERVATIONS) histogram.series({ provider }).observe(value);
  for (const [labels, by] of COUNTS) counter.series(labels).inc(by);
  plain.inc();
  plain.inc(2);
  return registry;
}

function promClients(): Registry {
  const registry = new Registry();
  const registers = [registry];
  const histogram = new Histogram({ name: 'x_seconds', help: 'A histogram.', labelNames: ['provider'], buckets: BUCKETS, registers });
  const counter = new Counter({ name: 'x_total', help: 'A counter.', labelNames: ['provider', 'status'], registers });
  const plain = new Counter({ name: 'x_plain_total', help: 'Unlabelled.', registers });
  for (const [provider, value] of OBSERVATIONS) histogram.observe({ provider }, value);
  for (const [labels, by] of COUNTS) counter.inc(labels, by);
  plain.inc();
  plain.inc(2);
  return registry;
}

test("the exposition is prom-client's, byte for byte", async () => {
  const text = await ours().metrics();
  expect(text).toBe(await promClients().metrics());
  expect(text).toContain('x_seconds_bucket{le="0.005",provider="openai"} 2\n');
  expect(text).toContain('x_seconds_bucket{le="+Inf",provider="openai"} 3\n');
  expect(text).toContain('x_total{provider="openai",status="200"} 4\n');
});

test("a cluster's aggregate is prom-client's too (each process's samples summed by label set)", async () => {
  const aggregate = async (make: () => Registry) => AggregatorRegistry.aggregate([await make().getMetricsAsJSON(), await make().getMetricsAsJSON()]).metrics();
  const text = await aggregate(ours);
  expect(text).toBe(await aggregate(promClients));
  expect(text).toContain('x_seconds_count{provider="openai"} 6\n');
});

test('a series is made once per label set and kept', () => {
  const family = new CounterFamily({ name: 'y_total', help: 'y', labelNames: ['a', 'b'] as const, registers: [] });
  const series = family.series({ a: '1', b: '2' });
  expect(family.series({ a: '1', b: '2' })).toBe(series);
  expect(family.series({ a: '1', b: '3' })).not.toBe(series);
  expect(family.series({ a: '12', b: '' })).not.toBe(series);
});

test('a counter refuses to go down or by a non-finite amount; a histogram refuses a non-finite observation', () => {
  const counter = new CounterFamily({ name: 'z_total', help: 'z', labelNames: [], registers: [] }).series({});
  for (const by of [-1, NaN, Infinity]) expect(() => counter.inc(by)).toThrow(TypeError);
  expect(counter.value).toBe(0);
  const histogram = new HistogramFamily({ name: 'z_seconds', help: 'z', labelNames: [], buckets: [1], registers: [] }).series({});
  for (const value of [NaN, Infinity, -Infinity]) expect(() => histogram.observe(value)).toThrow(TypeError);
  expect(histogram.count).toBe(0);
});
