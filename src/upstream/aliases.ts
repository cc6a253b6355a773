/**
 * Model aliases (`models.aliases`): a public name for one or more configured models. An alias with
 * several targets splits its requests by weight (a canary); its fallback list is tried in order when
 * the chosen target's pool has no worker to take a request. Built once per config: a reload swaps them.
 */
import type { Config } from '../config';

export interface AliasTarget {
  /** `<provider>/<model_name>`. */
  readonly model: string;
  readonly provider: string;
  readonly modelName: string;
  readonly weight: number;
}

export interface Alias {
  readonly name: string;
  readonly targets: readonly AliasTarget[];
  readonly fallback: readonly AliasTarget[];
}

export type AliasTable = ReadonlyMap<string, Alias>;

export function buildAliases(config: Pick<Config, 'models'>): AliasTable {
  const table = new Map<string, Alias>();
  for (const [name, alias] of Object.entries(config.models.aliases)) {
    const targets = typeof alias === 'string' ? [target(alias, 1)] : alias.targets.map((entry) => target(entry.model, entry.weight));
    const fallback = typeof alias === 'string' ? [] : alias.fallback.map((model) => target(model, 1));
    table.set(name, { name, targets, fallback });
  }
  return table;
}

function target(model: string, weight: number): AliasTarget {
  const slash = model.indexOf('/');
  return { model, provider: model.slice(0, slash), modelName: model.slice(slash + 1), weight };
}

/** Pure: one of the targets, each with a chance of its weight over the sum; `random` is in [0, 1). */
export function pickByWeight<T extends { readonly weight: number }>(targets: readonly T[], random: number): T {
  if (targets.length === 1) return targets[0]!;
  let total = 0;
  for (const candidate of targets) total += candidate.weight;
  let point = random * total;
  for (const candidate of targets) {
    point -= candidate.weight;
    if (point < 0) return candidate;
  }
  return targets[targets.length - 1]!;
}
