/**
 * Pure: what an answer cost, from its usage and the operator's price table (`prices` in the config):
 * the first glob over `<provider>/<model_name>` that matches the model the worker served, its price
 * per million tokens for input (cached input at its own price when it has one and the worker reported
 * cached tokens) and for output. Kept in nano-units of the currency (1e-9), whole numbers, so that
 * millions of answers add up exactly; shown in the currency (nanos / 1e9).
 */
import { globMatches } from '../common/model-globs';
import type { TokenUsage } from '../context';

export interface ModelPrice {
  inputPerMillion: number;
  outputPerMillion: number;
  cachedInputPerMillion?: number;
}

export interface PriceTable {
  currency: string;
  models: Readonly<Record<string, ModelPrice>>;
  unpricedModels?: 'allow' | 'refuse';
}

/** Nano-units of the currency in one unit. */
export const NANOS = 1e9;
/** One answer costs at most a million units of the currency; a key's day adds up exactly in nano-units up to 2^53 (about 9 million units). */
const MAX_COST_NANOS = 1e6 * NANOS;

export class Prices {
  private readonly globs: ReadonlyArray<[string, ModelPrice]>;
  /** Model -> its price (or none): a model is looked up in the table once. */
  private readonly seen = new Map<string, ModelPrice | null>();

  constructor(readonly table: PriceTable) {
    this.globs = Object.entries(table.models);
  }

  get currency(): string {
    return this.table.currency;
  }

  /** The price of `<provider>/<model_name>`, or undefined when no glob names it. */
  priceOf(model: string): ModelPrice | undefined {
    let price = this.seen.get(model);
    if (price === undefined) {
      price = this.globs.find(([glob]) => globMatches(glob, model))?.[1] ?? null;
      if (this.seen.size < 10_000) this.seen.set(model, price); // models come from config: few
    }
    return price ?? undefined;
  }

  /** What this usage of the model cost, in nano-units (0 when the model has no price). */
  costNanos(model: string, usage: TokenUsage): number {
    const price = this.priceOf(model);
    if (!price) return 0;
    const cached = price.cachedInputPerMillion === undefined ? 0 : Math.min(usage.cachedTokens ?? 0, usage.promptTokens);
    // A price per million tokens is, per token, that price x 1000 nano-units.
    const nanos = (usage.promptTokens - cached) * price.inputPerMillion * 1000 + cached * (price.cachedInputPerMillion ?? 0) * 1000 + usage.completionTokens * price.outputPerMillion * 1000;
    // Bounded: counts are at most 1e12 (usage-scanner.ts) and prices 1e6 a million, but a day's sum
    // must stay a safe integer in every store.
    return Math.min(Math.round(nanos), MAX_COST_NANOS);
  }
}

/** Nano-units as an amount of the currency. */
export const amountOf = (nanos: number): number => nanos / NANOS;
