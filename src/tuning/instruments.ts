/**
 * Counters and histograms, as metric families of series (one per label set). prom-client's own turn
 * the label object into a key string and allocate on every call: 2.1 us for one request's metrics,
 * measured in a loop, against 0.1 us here. A family finds a series through one Map per label name,
 * and a caller that counts into the same series again keeps it. Families sit in a prom-client
 * registry beside its gauges and default metrics: the registry reads `name` and `get()`, for the text
 * exposition and for cluster aggregation alike, and gets the samples prom-client's would give, in
 * the same order. The A/B against prom-client's in one process that keeps them is in README.md here.
 */
import type { Metric, Registry } from 'prom-client';

type Labels<L extends string> = Readonly<Record<L, string>>;

interface Sample {
  value: number;
  labels: Record<string, string | number>;
  metricName?: string;
}

interface Config<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  registers: Registry[];
}

/** The series of one instrument, one Map level per label name. */
abstract class MetricFamily<L extends string, S extends { labels: Labels<L> }> {
  readonly name: string;
  readonly help: string;
  readonly aggregator = 'sum';
  private readonly labelNames: readonly L[];
  private readonly root = new Map<string, unknown>();
  private readonly all: S[] = [];

  constructor({ name, help, labelNames, registers }: Config<L>) {
    this.name = name;
    this.help = help;
    this.labelNames = labelNames;
    // The registry's type lists only prom-client's classes; what it calls is name and get() (lib/registry.js).
    for (const registry of registers) registry.registerMetric(this as unknown as Metric);
  }

  /** The series for these label values, made at first use (`{}` for a family without labels). */
  series(labels: Labels<L>): S {
    let level = this.root;
    const last = this.labelNames.length - 1;
    for (let i = 0; i < last; i++) {
      const value = labels[this.labelNames[i]!];
      let next = level.get(value) as Map<string, unknown> | undefined;
      if (next === undefined) {
        next = new Map();
        level.set(value, next);
      }
      level = next;
    }
    const leaf = last === -1 ? '' : labels[this.labelNames[last]!];
    let found = level.get(leaf) as S | undefined;
    if (found === undefined) {
      const own = Object.fromEntries(this.labelNames.map((name) => [name, labels[name]])) as Labels<L>;
      found = this.create(own);
      level.set(leaf, found);
      this.all.push(found);
    }
    return found;
  }

  protected abstract readonly type: string;
  protected abstract create(labels: Labels<L>): S;
  protected abstract samples(series: S): Sample[];

  async get() {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: this.all.flatMap((series) => this.samples(series)) };
  }
}

export class CounterSeries<L extends string> {
  value = 0;
  constructor(readonly labels: Labels<L>) {}

  inc(by = 1): void {
    if (!(by >= 0 && by < Infinity)) throw new TypeError(`a counter only goes up by a finite amount, not ${by}`);
    this.value += by;
  }
}

export class CounterFamily<L extends string> extends MetricFamily<L, CounterSeries<L>> {
  protected readonly type = 'counter';

  protected create(labels: Labels<L>): CounterSeries<L> {
    return new CounterSeries(labels);
  }

  protected samples(series: CounterSeries<L>): Sample[] {
    return [{ value: series.value, labels: { ...series.labels } }];
  }
}

export class HistogramSeries<L extends string> {
  /** Observations per bucket, not cumulative; the last one is +Inf's own. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Labels<L>,
    private readonly upperBounds: readonly number[],
  ) {
    this.counts = new Float64Array(upperBounds.length + 1);
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`not a finite observation: ${value}`);
    let bucket = 0;
    while (bucket < this.upperBounds.length && value > this.upperBounds[bucket]!) bucket++;
    this.counts[bucket]!++;
    this.sum += value;
    this.count++;
  }
}

export class HistogramFamily<L extends string> extends MetricFamily<L, HistogramSeries<L>> {
  protected readonly type = 'histogram';
  private readonly upperBounds: readonly number[];

  constructor(config: Config<L> & { buckets: readonly number[] }) {
    super(config);
    this.upperBounds = [...config.buckets].sort((a, b) => a - b);
  }

  protected create(labels: Labels<L>): HistogramSeries<L> {
    return new HistogramSeries(labels, this.upperBounds);
  }

  /** As prom-client writes a histogram: cumulative buckets with le first, then +Inf, sum and count. */
  protected samples(series: HistogramSeries<L>): Sample[] {
    const bucket = `${this.name}_bucket`;
    let cumulative = 0;
    const samples: Sample[] = this.upperBounds.map((le, i) => {
      cumulative += series.counts[i]!;
      return { value: cumulative, labels: { le, ...series.labels }, metricName: bucket };
    });
    samples.push(
      { value: series.count, labels: { le: '+Inf', ...series.labels }, metricName: bucket },
      { value: series.sum, labels: { ...series.labels }, metricName: `${this.name}_sum` },
      { value: series.count, labels: { ...series.labels }, metricName: `${this.name}_count` },
    );
    return samples;
  }
}
