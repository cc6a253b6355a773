/**
 * V8's allocation-site pretenuring, turned off in serving processes. V8 watches which sites allocate
 * objects that survive young collections, and once nearly all of a site's objects survive one, it
 * allocates that site's objects in the old generation from then on. A request-path object only looks
 * long-lived in a process's first seconds under load (a collection that lands while 64 requests are in
 * flight finds most of them alive), but V8 keeps the decision: about a dozen request-path sites go on
 * allocating in the old generation for the life of the process. A young collection takes every old
 * object's pointers into the young generation as roots, dead object or not, so each finished request's
 * young objects then survive and are promoted until the next full collection: 2.3-2.5 MB per young
 * collection against 0.01-0.05, a full collection every one or two seconds, and 20-25 % fewer
 * requests/s (`--trace-gc-nvp` and `--trace-pretenuring-statistics`, test/tuning/pretenuring.test.ts).
 * Which processes it hit was chance: one in three on a quiet machine, most on a busy one.
 *
 * A process started with `node --allocation-site-pretenuring` (or its `--no-` form) keeps what it was given.
 */
import v8 from 'node:v8';

export function turnOffPretenuring(execArgv: readonly string[] = process.execArgv): void {
  if (execArgv.some((arg) => arg.endsWith('allocation-site-pretenuring'))) return;
  v8.setFlagsFromString('--no-allocation-site-pretenuring');
}
