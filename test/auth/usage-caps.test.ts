/**
 * The usage recorder's bounds, against a store that only records what it is given: the ledger pairs
 * (model and end user) one key makes a day, and all keys of a process together; and the retention
 * job that deletes old months in calls of PRUNE_SLICE rows until a call finds fewer, and stops.
 */
import { OVER_CAP, PROCESS_PAIRS, PRUNE_SLICE, retainUsage, UsageRecorder } from '../../src/auth/usage-recorder';
import type { KeyUse } from '../../src/store/types';
import { sleep } from '../helpers/time';

function recorder(pairsPerKeyDay: number) {
  const written: KeyUse[] = [];
  return { written, usage: new UsageRecorder({ recordUse: async (uses) => void written.push(...uses) }, undefined, pairsPerKeyDay) };
}
const at = new Date('2031-03-04T05:06:07Z');

test("a key's pairs past its cap are counted under *, nothing lost; a pair seen before keeps its row", async () => {
  const { written, usage } = recorder(3);
  const key = { id: 'key_a', accountId: 'acc' };
  for (let i = 0; i < 10; i++) usage.ended(key, true, at, { model: 'p/m', endUser: `eu_${i}` });
  usage.ended(key, true, at, { model: 'p/m', endUser: 'eu_0' }); // seen: its own row
  await usage.flush();
  const rows = new Map(written.map((use) => [use.endUser, use.requests]));
  expect(rows).toEqual(new Map([['eu_0', 2], ['eu_1', 1], ['eu_2', 1], [OVER_CAP, 7]]));
  expect(written.find((use) => use.endUser === OVER_CAP)?.model).toBe(OVER_CAP);
});

test("a request ending on the day before today's uses (past midnight) is capped within its own day, not today's", async () => {
  const { written, usage } = recorder(1);
  const key = { id: 'key_d', accountId: 'acc' };
  const today = new Date('2031-03-05T00:00:01Z');
  usage.ended(key, true, today, { model: 'p/m', endUser: 'eu_today' });
  usage.ended(key, true, today, { model: 'p/m', endUser: 'eu_more' }); // past today's cap of 1
  usage.ended(key, true, at, { model: 'p/m', endUser: 'eu_late' }); // the day before: its own cap
  usage.ended(key, true, at, { model: 'p/m', endUser: 'eu_later' }); // past the day before's cap
  usage.ended(key, true, at, { model: 'p/m', endUser: 'eu_late' }); // seen that day
  await usage.flush();
  const rows = written.map(({ date, endUser, requests }) => `${date} ${endUser} ${requests}`).sort();
  expect(rows).toEqual(['2031-03-04 * 1', '2031-03-04 eu_late 2', '2031-03-05 * 1', '2031-03-05 eu_today 1']);
});

test('all keys of a process together keep at most PROCESS_PAIRS caps of pairs a day', async () => {
  const { written, usage } = recorder(2);
  const keys = PROCESS_PAIRS + 5;
  for (let k = 0; k < keys; k++) for (let i = 0; i < 2; i++) usage.ended({ id: `key_${k}`, accountId: 'acc' }, true, at, { model: 'p/m', endUser: `eu_${i}` });
  await usage.flush();
  const named = written.filter((use) => use.endUser !== OVER_CAP);
  expect(named).toHaveLength(PROCESS_PAIRS * 2);
  expect(written.reduce((sum, use) => sum + use.requests, 0)).toBe(keys * 2);
  // A new day starts the count again.
  usage.ended({ id: 'key_late', accountId: 'acc' }, true, new Date('2031-03-05T00:00:01Z'), { model: 'p/m', endUser: 'eu_9' });
  written.length = 0;
  await usage.flush();
  expect(written.map((use) => use.endUser)).toEqual(['eu_9']);
});

test('retention deletes in calls of PRUNE_SLICE until one finds fewer, dated retentionDays back, and stops when told', async () => {
  const calls: Array<[string, number]> = [];
  let left = 2 * PRUNE_SLICE + 7;
  const stop = retainUsage(
    {
      pruneUsage: async (before, limit) => {
        calls.push([before, limit]);
        const deleted = Math.min(left, limit);
        left -= deleted;
        return deleted;
      },
    },
    100,
    () => undefined,
    60_000,
    0,
  );
  const until = Date.now() + 5000;
  while (calls.length < 3 && Date.now() < until) await sleep(10);
  stop();
  expect(calls).toHaveLength(3);
  const expected = new Date(Date.now() - 100 * 86_400_000).toISOString().slice(0, 10);
  for (const [before, limit] of calls) expect([before, limit]).toEqual([expected, PRUNE_SLICE]);
  expect(left).toBe(0);
});

test('a retention call that fails is reported, and the job tries again at its next round', async () => {
  const errors: unknown[] = [];
  let calls = 0;
  const stop = retainUsage({ pruneUsage: async () => { calls++; throw new Error('store away'); } }, 100, (err) => errors.push(err), 20, 0);
  const until = Date.now() + 5000;
  while (errors.length < 2 && Date.now() < until) await sleep(10);
  stop();
  expect(errors.length).toBeGreaterThanOrEqual(2);
  expect(calls).toBe(errors.length);
  expect(String(errors[0])).toContain('store away');
});

test("a request's start note goes into its use once that is counted under a model: one use a key, the later time kept; a note that counts something stays", async () => {
  const { written, usage } = recorder(10);
  const key = { id: 'key_n', accountId: 'acc' };
  const later = new Date(at.getTime() + 1000);
  const detail = { model: 'p/m', endUser: '' };
  for (let i = 0; i < 3; i++) {
    usage.used(key, i === 1 ? later : at); // the second request started latest
    usage.ended(key, true, at, detail);
    usage.tokens(key, 10, 5, at, 0, detail);
  }
  await usage.flush();
  expect(written).toEqual([expect.objectContaining({ keyId: 'key_n', model: 'p/m', endUser: '', requests: 3, promptTokens: 30, completionTokens: 15, at: later })]);

  // A request still under way at the flush: its note is written alone, and so is a refusal made before a model was chosen.
  written.length = 0;
  usage.used(key, at);
  usage.used({ id: 'key_r', accountId: 'acc' }, at);
  usage.ended({ id: 'key_r', accountId: 'acc' }, false, at);
  usage.used({ id: 'key_r', accountId: 'acc' }, later);
  usage.ended({ id: 'key_r', accountId: 'acc' }, true, later, detail);
  await usage.flush();
  const rows = written.map(({ keyId, model, requests, refused, at: when }) => ({ keyId, model, requests, refused, at: when })).sort((a, b) => (a.keyId + a.model < b.keyId + b.model ? -1 : 1));
  expect(rows).toEqual([
    { keyId: 'key_n', model: '', requests: 0, refused: 0, at },
    { keyId: 'key_r', model: '', requests: 0, refused: 1, at: later },
    { keyId: 'key_r', model: 'p/m', requests: 1, refused: 0, at: later },
  ]);
});

test('two requests of one key at once, on two models, and a flush between one request and its end: every count once, the latest time kept', async () => {
  const { written, usage } = recorder(10);
  const key = { id: 'key_t', accountId: 'acc' };
  const t = (s: number) => new Date(at.getTime() + s * 1000);
  const rows = () => written.map(({ model, requests, refused, promptTokens, completionTokens, at: when }) => ({ model, requests, refused, promptTokens, completionTokens, at: when }));
  usage.used(key, t(0)); // request A starts
  usage.used(key, t(1)); // request B starts
  usage.ended(key, true, t(2), { model: 'p/a', endUser: '' });
  usage.tokens(key, 7, 3, t(2), 0, { model: 'p/a', endUser: '' });
  await usage.flush(); // B is still under way
  expect(rows()).toEqual([{ model: 'p/a', requests: 1, refused: 0, promptTokens: 7, completionTokens: 3, at: t(2) }]);

  written.length = 0;
  usage.ended(key, true, t(3), { model: 'p/b', endUser: '' });
  usage.tokens(key, 11, 5, t(3), 0, { model: 'p/b', endUser: '' });
  usage.used(key, t(4)); // request C starts: noted on B's use, the key's latest
  await usage.flush();
  expect(rows()).toEqual([{ model: 'p/b', requests: 1, refused: 0, promptTokens: 11, completionTokens: 5, at: t(4) }]);

  // C ends after the flush, on A's model: a use of its own, nothing of the earlier ones again.
  written.length = 0;
  usage.ended(key, true, t(5), { model: 'p/a', endUser: '' });
  await usage.flush();
  expect(rows()).toEqual([{ model: 'p/a', requests: 1, refused: 0, promptTokens: 0, completionTokens: 0, at: t(5) }]);

  // A start right after a flush is a note of its own, not a time set on a use already written.
  written.length = 0;
  usage.used(key, t(6));
  await usage.flush();
  expect(rows()).toEqual([{ model: '', requests: 0, refused: 0, promptTokens: 0, completionTokens: 0, at: t(6) }]);
});
