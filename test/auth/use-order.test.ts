import { add, type PendingUse } from '../../src/auth/pending-uses';
import { UsageRecorder } from '../../src/auth/usage-recorder';
import { SLICE, SORTED_CHUNK, SORTED_RUN, sortedRun } from '../../src/auth/use-order';

function useOf(keyId: string, date: string, model: string): PendingUse {
  return { keyId, accountId: 'acc', date, at: 0, requests: 1, refused: 0, costNanos: 0, promptTokens: 0, completionTokens: 0, model, endUser: '', all: undefined };
}

/** A small deterministic generator, so that a failure can be replayed. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
    return state / 4_294_967_296;
  };
}

/** Key ids that sort awkwardly: common prefixes, lengths, a surrogate pair, upper before lower case. */
function awkwardIds(count: number, next: () => number): string[] {
  const alphabet = ['a', 'b', 'A', 'Z', '_', '0', '9', 'é', '\u{1F600}', '\uFFFF'];
  const ids = new Set<string>();
  while (ids.size < count) {
    const length = 1 + Math.floor(next() * 8);
    let id = 'key_';
    for (let i = 0; i < length; i++) id += alphabet[Math.floor(next() * alphabet.length)];
    ids.add(id);
  }
  return [...ids];
}

/** A batch as the recorder keeps it: each key's latest use, some keys with several (days and models). */
function batchOf(ids: readonly string[], next: () => number): Map<string, PendingUse> {
  const batch = new Map<string, PendingUse>();
  for (const id of ids) {
    const latest = useOf(id, '2030-05-02', 'p/b');
    if (next() < 0.3) for (const [date, model] of [['2030-05-01', 'p/b'], ['2030-05-02', 'p/a']] as const) add(latest, useOf(id, date, model));
    batch.set(id, latest);
  }
  return batch;
}

/** The order the batch is written in, worked out the plain way: every key sorted, then each key's uses by day, model and end user. */
function plainOrder(batch: ReadonlyMap<string, PendingUse>, keys: readonly string[]): string[] {
  return [...keys].sort().flatMap((key) => {
    const latest = batch.get(key)!;
    const uses = latest.all === undefined ? [latest] : [...latest.all.values()];
    return uses.map((use) => `${use.keyId} ${use.date} ${use.model} ${use.endUser}`).sort();
  });
}

const named = (uses: readonly PendingUse[]) => uses.map((use) => `${use.keyId} ${use.date} ${use.model} ${use.endUser}`);

test.each([1, 7, SORTED_CHUNK - 1, SORTED_CHUNK, SORTED_CHUNK + 1, 3 * SORTED_CHUNK + 17, SORTED_RUN])('a run of %i keys is taken in the plain order, slice by slice, whatever the slices cut', async (count) => {
  const next = random(count);
  const keys = awkwardIds(count, next);
  const batch = batchOf(keys, next);
  for (const take of count <= SORTED_CHUNK + 1 ? [1, 3, SLICE] : [7, SLICE]) {
    let turns = 0;
    const run = await sortedRun(batch, keys, 0, async () => {
      turns++;
    });
    expect(turns).toBe(Math.ceil(count / SORTED_CHUNK) - 1);
    const taken: PendingUse[] = [];
    while (!run.done) {
      const slice = run.take(take);
      expect(slice.length).toBeGreaterThan(0);
      expect(slice.length).toBeLessThanOrEqual(take);
      taken.push(...slice);
    }
    expect(named(taken)).toEqual(plainOrder(batch, keys));
  }
});

test('what is left of a run after a slice is every use not taken, once each, in order', async () => {
  const next = random(42);
  const keys = awkwardIds(SORTED_CHUNK * 2 + 5, next);
  const batch = batchOf(keys, next);
  const run = await sortedRun(batch, keys, 0, async () => undefined);
  const first = run.take(SLICE + 1); // cuts into a key with several uses, likely as not
  const rest = run.rest();
  expect(run.done).toBe(true);
  expect(run.take(SLICE)).toEqual([]);
  expect([...named(first), ...named(rest)]).toEqual(plainOrder(batch, keys));
});

test('a run starting further on takes only its own keys', async () => {
  const next = random(7);
  const keys = awkwardIds(SORTED_RUN + 300, next);
  const batch = batchOf(keys, next);
  const second = await sortedRun(batch, keys, SORTED_RUN, async () => undefined);
  expect(named(second.rest())).toEqual(plainOrder(batch, keys.slice(SORTED_RUN)));
});

test("a flush sorts its keys in pieces: requests get turns of the event loop before the first slice goes", async () => {
  let turnsSeen = 0;
  let turnsAtFirstSlice = -1;
  const written: string[] = [];
  const recorder = new UsageRecorder({
    recordUse: async (uses) => {
      if (turnsAtFirstSlice < 0) turnsAtFirstSlice = turnsSeen;
      written.push(...uses.map((use) => use.keyId));
    },
  });
  const count = SORTED_RUN; // SORTED_RUN / SORTED_CHUNK chunks
  const id = (i: number) => `key_${String((i * 7919) % count).padStart(6, '0')}`;
  for (let i = 0; i < count; i++) recorder.ended({ id: id(i), accountId: 'acc' }, true, new Date('2030-05-01T12:00:00Z'));
  // A request's turn: counted each time the event loop comes round while the flush runs.
  let flushing = true;
  const tick = () => {
    turnsSeen++;
    if (flushing) setImmediate(tick);
  };
  setImmediate(tick);
  await recorder.flush();
  flushing = false;
  expect(turnsAtFirstSlice).toBeGreaterThanOrEqual(Math.ceil(count / SORTED_CHUNK) - 1);
  expect(written).toHaveLength(count);
  expect(written).toEqual([...written].sort());
});

test('a key whose uses a slice cuts, used again between the slices, the second slice failing: every use counted once, by key and model', async () => {
  const written = new Map<string, number>();
  let slices = 0;
  const cut = 'key_m'; // sorts after the SLICE - 1 keys before it: its first use ends the first slice
  const models = ['p/a', 'p/b', 'p/c'];
  const at = new Date('2030-06-01T12:00:00Z');
  const recorder = new UsageRecorder({
    async recordUse(uses) {
      slices++;
      if (slices === 1) {
        // Between the slices: requests made with the cut key, of a model already sent and of one not yet.
        recorder.ended({ id: cut, accountId: 'acc' }, true, at, { model: 'p/a', endUser: '' });
        recorder.ended({ id: cut, accountId: 'acc' }, true, at, { model: 'p/c', endUser: '' });
      }
      if (slices === 2) throw new Error('store away');
      for (const use of uses) written.set(`${use.keyId} ${use.model}`, (written.get(`${use.keyId} ${use.model}`) ?? 0) + use.requests);
    },
  });
  const before = Array.from({ length: SLICE - 1 }, (_, i) => `key_a${String(i).padStart(4, '0')}`);
  const after = Array.from({ length: 10 }, (_, i) => `key_z${i}`);
  for (const id of [...after, cut, ...before]) for (const model of id === cut ? models : ['p/a']) recorder.ended({ id, accountId: 'acc' }, true, at, { model, endUser: '' });
  await recorder.flush();
  expect(slices).toBe(2);
  expect(written.get(`${cut} p/a`)).toBe(1); // its first use went with the first slice
  expect(written.has(`${cut} p/b`)).toBe(false);
  await recorder.flush();
  expect(written.get(`${cut} p/a`)).toBe(2);
  expect(written.get(`${cut} p/b`)).toBe(1);
  expect(written.get(`${cut} p/c`)).toBe(2);
  for (const id of [...before, ...after]) expect(written.get(`${id} p/a`)).toBe(1);
  expect([...written.values()].reduce((sum, n) => sum + n, 0)).toBe(before.length + after.length + models.length + 2);
});
