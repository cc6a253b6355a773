/**
 * Waiting in tests, one way: `eventually` polls for a condition (its bound guards against a hang and
 * is not what a test asserts), `sleep` lets time pass where time is the point (a window closing, a
 * rate refilling). A test that asserts something did not happen after a sleep also shows, in the same
 * run, that it does happen when it should (a positive control), so a slow mechanism cannot pass it.
 */
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Poll until `check` returns a value (not undefined) or the bound passes; the bound is a hang guard, not an assertion. */
export async function eventually<T>(check: () => Promise<T | undefined> | T | undefined, bound = 5000): Promise<T> {
  const until = Date.now() + bound;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > until) throw new Error('condition not met in time');
    await sleep(20);
  }
}
