/**
 * A written use is kept to be its key's next (auth/pending-uses.ts): made again, it carries none of
 * what it counted, nor its day, model, end user or account; a slice whose write failed is sent again
 * as it was, whatever its keys did since; a request's start noted on a use of its own becomes its
 * use; the pool keeps at most KEPT_USES an age, and lets a use go after two ages of flushes.
 */
import { AGE_MS, KEPT_USES, MODEL_NAMES, UsePool } from '../../src/auth/pending-uses';
import { UsageRecorder } from '../../src/auth/usage-recorder';
import type { KeyUse } from '../../src/store/types';

const day1 = new Date('2031-03-04T05:06:07Z');
const day2 = new Date('2031-03-05T00:00:01Z');
const rowOf = (use: KeyUse) => `${use.keyId} ${use.accountId} ${use.date} ${use.model} ${use.endUser} r${use.requests} x${use.refused} p${use.promptTokens} c${use.completionTokens} $${use.costNanos} ${use.at.toISOString()}`;

test("a key's next use, made of its written one, counts only what came after: its day, model, end user and account its own", async () => {
  const written: KeyUse[][] = [];
  const usage = new UsageRecorder({ recordUse: async (uses) => void written.push(uses.map((use) => ({ ...use }))) });
  usage.used({ id: 'key_a', accountId: 'acc_1' }, day1);
  usage.tokens({ id: 'key_a', accountId: 'acc_1' }, 10, 20, day1, 300, { model: 'p/a', endUser: 'eu_1' });
  usage.ended({ id: 'key_a', accountId: 'acc_1' }, true, day1, { model: 'p/a', endUser: 'eu_1' });
  await usage.flush();
  // The key moved to another account; its next request, a day later, on another model, is refused.
  usage.used({ id: 'key_a', accountId: 'acc_2' }, day2);
  usage.ended({ id: 'key_a', accountId: 'acc_2' }, false, day2, { model: 'p/b', endUser: '' });
  await usage.flush();
  // Then one dated the day before (begun before midnight): its time is its own, not the later one's.
  usage.ended({ id: 'key_a', accountId: 'acc_2' }, true, new Date('2031-03-04T23:59:58Z'), { model: 'p/b', endUser: '' });
  await usage.flush();
  expect(written.map((slice) => slice.map(rowOf))).toEqual([
    ['key_a acc_1 2031-03-04 p/a eu_1 r1 x0 p10 c20 $300 2031-03-04T05:06:07.000Z'],
    ['key_a acc_2 2031-03-05 p/b  r0 x1 p0 c0 $0 2031-03-05T00:00:01.000Z'],
    ['key_a acc_2 2031-03-04 p/b  r1 x0 p0 c0 $0 2031-03-04T23:59:58.000Z'],
  ]);
});

test("a slice whose write failed is sent again as it was, though its key's use was made again and counted meanwhile", async () => {
  const written: string[][] = [];
  let fail = true;
  const usage = new UsageRecorder({
    async recordUse(uses) {
      const rows = uses.map(rowOf);
      if (fail) throw new Error('store away');
      written.push(rows);
    },
  });
  const key = { id: 'key_b', accountId: 'acc' };
  usage.ended(key, true, day1, { model: 'p/a', endUser: '' });
  await usage.flush(); // fails: the slice is kept as sent
  usage.ended(key, true, day1, { model: 'p/a', endUser: '' });
  usage.ended(key, true, day1, { model: 'p/a', endUser: '' });
  fail = false;
  await usage.flush();
  expect(written).toEqual([['key_b acc 2031-03-04 p/a  r1 x0 p0 c0 $0 2031-03-04T05:06:07.000Z'], ['key_b acc 2031-03-04 p/a  r2 x0 p0 c0 $0 2031-03-04T05:06:07.000Z']]);
});

test('the pool gives a key its written use again, keeps at most KEPT_USES an age, and lets a use go after two ages', () => {
  let now = 1_000_000;
  const pool = new UsePool(() => now);
  const made = (i: number) => pool.use(`key_${i}`, 'acc', '2031-03-04', 'p/m', '');
  const first = made(0);
  first.requests = 3;
  expect(pool.send(first).requests).toBe(3);
  expect(made(0)).toBe(first);
  expect(first.requests).toBe(0);
  expect(made(0)).not.toBe(first); // taken: not given twice

  const uses = Array.from({ length: KEPT_USES + 1 }, (_, i) => made(i));
  for (const use of uses) pool.send(use);
  expect(made(KEPT_USES)).not.toBe(uses[KEPT_USES]); // past the bound: let go
  expect(made(KEPT_USES - 1)).toBe(uses[KEPT_USES - 1]);

  now += AGE_MS;
  pool.age(); // one age on: still kept
  expect(made(1)).toBe(uses[1]);
  now += AGE_MS;
  pool.age();
  expect(made(2)).not.toBe(uses[2]);
});

test('model names past MODEL_NAMES are kept as they come', () => {
  const pool = new UsePool();
  const names = Array.from({ length: MODEL_NAMES + 5 }, (_, i) => `p/model-${i}`);
  expect(names.map((name, i) => pool.use(`key_${i}`, 'acc', '2031-03-04', name, '').model)).toEqual(names);
  const kept = pool.use('key_x', 'acc', '2031-03-04', 'p/model-1', 'eu');
  pool.send(kept);
  const again = pool.use('key_x', 'acc', '2031-03-04', `p/model-${MODEL_NAMES + 3}`, '');
  expect([again.model, again.endUser]).toEqual([`p/model-${MODEL_NAMES + 3}`, '']);
});

test("a request's start, noted on a use of its own beside the key's use of the day before, becomes the request's use, written once, under the account it is counted to", async () => {
  const written: string[] = [];
  const usage = new UsageRecorder({ recordUse: async (uses) => void written.push(...uses.map(rowOf)) });
  const key = { id: 'key_c', accountId: 'acc' };
  usage.ended(key, true, day1, { model: 'p/a', endUser: '' });
  usage.used(key, day2); // a new day: a note of its own
  usage.ended(key, true, day2, { model: 'p/b', endUser: '' });
  usage.used(key, day2);
  usage.ended(key, true, day2, { model: 'p/b', endUser: '' });
  await usage.flush();
  // Begun under one account, counted under another (the key moved between): counted to the latter.
  usage.used(key, day2);
  usage.ended({ id: 'key_c', accountId: 'acc_2' }, true, day2, { model: 'p/c', endUser: '' });
  await usage.flush();
  expect(written).toEqual(['key_c acc 2031-03-04 p/a  r1 x0 p0 c0 $0 2031-03-04T05:06:07.000Z', 'key_c acc 2031-03-05 p/b  r2 x0 p0 c0 $0 2031-03-05T00:00:01.000Z', 'key_c acc_2 2031-03-05 p/c  r1 x0 p0 c0 $0 2031-03-05T00:00:01.000Z']);
});

test('a use kept after its write is let go once two ages have passed at flushes', async () => {
  let now = 5_000_000;
  const pool = new UsePool(() => now);
  const usage = new UsageRecorder({ recordUse: async () => undefined }, undefined, undefined, pool);
  const key = { id: 'key_d', accountId: 'acc' };
  const kept = async () => {
    usage.ended(key, true, day1, { model: 'p/a', endUser: '' });
    await usage.flush();
    return pool.use(key.id, key.accountId, '2031-03-04', 'p/a', '');
  };
  const first = await kept();
  pool.send(first);
  expect(pool.use(key.id, key.accountId, '2031-03-04', 'p/a', '')).toBe(first); // written: kept
  pool.send(first);
  for (let i = 0; i < 2; i++) {
    now += AGE_MS;
    await usage.flush(); // nothing to write: ages all the same
  }
  expect(pool.use(key.id, key.accountId, '2031-03-04', 'p/a', '')).not.toBe(first);
});
