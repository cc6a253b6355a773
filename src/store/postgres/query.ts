/**
 * One statement on a connection, bounded by a deadline measured on our side: a frozen server never
 * answers, and its statement_timeout is enforced by the very server that is frozen. The store's
 * queries and the import's transaction both run their statements through it.
 */
import type pg from 'pg';
import { StoreDeadlineExceeded } from '../guarded';

/**
 * `sql` on `client`, or StoreDeadlineExceeded after `timeoutMs`: then the connection is stuck behind
 * the statement, and the caller ends it rather than use it again (the statement's own answer, when it
 * comes, is dropped).
 */
export async function queryWithin<R extends pg.QueryResultRow = pg.QueryResultRow>(client: pg.PoolClient, sql: string, params: unknown[], timeoutMs: number): Promise<pg.QueryResult<R>> {
  let timer: NodeJS.Timeout | undefined;
  const running = client.query<R>(sql, params);
  try {
    return await Promise.race([
      running,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new StoreDeadlineExceeded(timeoutMs)), timeoutMs);
      }),
    ]);
  } catch (err) {
    running.catch(() => undefined);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}
