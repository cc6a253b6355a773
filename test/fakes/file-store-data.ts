/** Pure: the file store's changes that are more than a line, as new data from old. */
import { periodOf, sum, type Data } from '../../src/store/file-schema';
import type { KeyUse } from '../../src/store/types';

/** A batch of use added to each key's totals and latest use, and to its daily rows (those before `oldest` dropped). */
export function withUse(data: Data, uses: readonly KeyUse[], oldest: string): Data {
  const byKey = new Map<string, KeyUse[]>();
  for (const use of uses) byKey.set(use.keyId, [...(byKey.get(use.keyId) ?? []), use]);
  const keys = data.keys.map((k) => {
    const mine = byKey.get(k.id);
    if (!mine) return k;
    const latest = mine.reduce((at, use) => (use.at.toISOString() > at ? use.at.toISOString() : at), k.lastUsedAt ?? '');
    return {
      ...k,
      lastUsedAt: latest || null,
      usage: {
        requests: k.usage.requests + sum(mine, 'requests'),
        promptTokens: k.usage.promptTokens + sum(mine, 'promptTokens'),
        completionTokens: k.usage.completionTokens + sum(mine, 'completionTokens'),
      },
    };
  });
  const usage = [...data.usage];
  for (const use of uses) {
    const day = usage.find((row) => row.keyId === use.keyId && row.date === use.date);
    if (day) {
      day.requests += use.requests;
      day.refused += use.refused;
      day.costNanos += use.costNanos;
      day.promptTokens += use.promptTokens;
      day.completionTokens += use.completionTokens;
    } else {
      usage.push({ date: use.date, accountId: use.accountId, keyId: use.keyId, requests: use.requests, refused: use.refused, costNanos: use.costNanos, promptTokens: use.promptTokens, completionTokens: use.completionTokens });
    }
  }
  return { ...data, keys, usage: usage.filter((row) => row.date >= oldest) };
}

/** Each named counter plus one (made at 1 with its expiry; expired ones dropped): the new counts, in order. */
export function withCountersBumped(data: Data, counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date): { data: Data; result: number[] } {
  const at = now.toISOString();
  const live = new Map(data.counters.filter((c) => c.expiresAt > at).map((c) => [c.name, c]));
  const result = counters.map(({ name, expiresAt }) => {
    const counter = live.get(name) ?? { name, count: 0, expiresAt: expiresAt.toISOString() };
    const bumped = { ...counter, count: counter.count + 1 };
    live.set(name, bumped);
    return bumped.count;
  });
  return { data: { ...data, counters: [...live.values()] }, result };
}

/** Tokens added to quota counters; counters of periods before `oldest` (a day) are dropped: a scope ends with its period. */
export function withQuotaUsage(data: Data, amounts: ReadonlyMap<string, number>, oldest: string): Data {
  const quotaUsage = { ...data.quotaUsage };
  for (const [scope, tokens] of amounts) quotaUsage[scope] = (quotaUsage[scope] ?? 0) + tokens;
  for (const scope of Object.keys(quotaUsage)) if (periodOf(scope) < oldest.slice(0, periodOf(scope).length)) delete quotaUsage[scope];
  return { ...data, quotaUsage };
}
