/**
 * The bounded hashing queue (pure bookkeeping) and the process's own: at most HASHING_AT_ONCE scrypt
 * computations run, HASHING_QUEUE more may wait, and a sign-in past that is refused at once.
 */
import { HASHING_AT_ONCE, HASHING_QUEUE, HashingQueue, hashPassword, reserveHashing, verifyPassword } from '../../src/accounts/passwords';

/** Work the test finishes by hand, noting when it started. */
function heldWork(started: string[], name: string) {
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  return {
    finish,
    work: () => {
      started.push(name);
      return done.then(() => name);
    },
  };
}

test('at most atOnce run, the rest wait in order; past atOnce + queue a place is refused, and a released one is free again', async () => {
  const queue = new HashingQueue(2, 3);
  const started: string[] = [];
  const works = ['a', 'b', 'c', 'd', 'e'].map((name) => heldWork(started, name));
  const turns = works.map(() => queue.reserve());
  expect(turns.every(Boolean)).toBe(true);
  expect(queue.reserve()).toBeUndefined(); // 2 + 3 taken
  const results = turns.map((turn, i) => turn!.run(works[i]!.work));
  await Promise.resolve();
  expect(started).toEqual(['a', 'b']);
  works[1]!.finish();
  await results[1];
  await new Promise((resolve) => setImmediate(resolve));
  expect(started).toEqual(['a', 'b', 'c']); // first come, first served
  expect(queue.load).toBe(4);
  const extra = queue.reserve();
  expect(extra).toBeDefined();
  expect(queue.reserve()).toBeUndefined();
  extra!.release();
  extra!.release(); // twice gives back one place, not two
  expect(queue.load).toBe(4);
  await expect(extra!.run(async () => 'x')).rejects.toThrow('used once');
  for (const w of works) w.finish();
  expect(await Promise.all(results)).toEqual(['a', 'b', 'c', 'd', 'e']);
  expect(queue.load).toBe(0);
});

test('the process hashes within its bound: a sign-in past the queue is refused at once, and a reserved turn checks a password', async () => {
  const stored = await hashPassword('the right password here');
  const turns = Array.from({ length: HASHING_AT_ONCE + HASHING_QUEUE }, () => reserveHashing());
  expect(turns.every(Boolean)).toBe(true);
  expect(reserveHashing()).toBeUndefined();
  const checks = turns.map((turn, i) => verifyPassword(i === 0 ? 'the right password here' : 'a wrong one', stored, turn));
  expect(reserveHashing()).toBeUndefined(); // running and waiting still count
  expect(await Promise.all(checks)).toEqual(turns.map((_, i) => i === 0));
  const again = reserveHashing();
  expect(again).toBeDefined();
  again!.release();
});
