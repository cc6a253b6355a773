/**
 * The embedded store's usage: each key's totals and latest use, its daily rows, and the ledger (a
 * day, key, model and end user; and the same by month, see ledger-spans.ts), all written by one
 * batch in one statement a table, each given the
 * batch as one JSON array: better-sqlite3 runs them on the event loop, and one statement for the
 * batch took 3.7-4.7 µs a key where one a key took 5.5-5.9 (the rest is writing the rows).
 */
import type { BreakdownQuery, KeyUse, UsageDay, UsageShare } from '../types';
import type { SqliteDatabase } from './database';
import type { Write } from './writer-thread';
import { instant } from '../sql/rows';
import { addUse } from '../sql/usage';
import { ledgerSpans, monthStart } from '../ledger-spans';

const LEDGER_KEY = 'account_id, date, key_id, model, end_user';

/**
 * A batch's use of its keys: `?` is a JSON array of [keyId, requests, promptTokens, completionTokens,
 * at], one a key (a key deleted meanwhile gets no row: nothing is added for it).
 */
const RECORD_KEY_USES = `insert into chatgate_key_usage as u (key_id, requests, prompt_tokens, completion_tokens, last_used_at)
  select value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4 from json_each(?)
  where exists (select 1 from chatgate_keys where id = value ->> 0)
  on conflict (key_id) do update set requests = u.requests + excluded.requests, prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = u.completion_tokens + excluded.completion_tokens, last_used_at = max(coalesce(u.last_used_at, ''), excluded.last_used_at)`;

/** What a usage row adds to the row it meets (`d`), for the daily rows and the ledger alike. */
const ADD_USE = addUse('d');

/** `?`: a JSON array of [keyId, date, accountId, requests, promptTokens, completionTokens, refused, costNanos, model, endUser] (a use from a caller that knew none of the last four counts them as 0 and ''). */
const RECORD_DAY_USES = `insert into chatgate_usage_daily as d (key_id, date, account_id, requests, prompt_tokens, completion_tokens, refused, cost_nanos)
  select value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, coalesce(value ->> 6, 0), coalesce(value ->> 7, 0) from json_each(?) where true
  on conflict (key_id, date) do update set ${ADD_USE}`;

/** The same array into the ledger, but for a use that counted nothing (a key's last use, its request not over). */
const RECORD_LEDGER_USES = `insert into chatgate_usage_ledger as d (key_id, date, account_id, requests, prompt_tokens, completion_tokens, refused, cost_nanos, model, end_user)
  select value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, coalesce(value ->> 6, 0), coalesce(value ->> 7, 0), coalesce(value ->> 8, ''), coalesce(value ->> 9, '') from json_each(?)
  where (value ->> 3) + (value ->> 4) + (value ->> 5) + coalesce(value ->> 6, 0) + coalesce(value ->> 7, 0) > 0
  on conflict (account_id, date, key_id, model, end_user) do update set ${ADD_USE}`;

/** The same array summed into each month's row (its first day), as the ledger's. */
const RECORD_MONTH_USES = `insert into chatgate_usage_ledger_monthly as d (key_id, month, account_id, requests, prompt_tokens, completion_tokens, refused, cost_nanos, model, end_user)
  select value ->> 0, substr(value ->> 1, 1, 7) || '-01', value ->> 2, value ->> 3, value ->> 4, value ->> 5, coalesce(value ->> 6, 0), coalesce(value ->> 7, 0), coalesce(value ->> 8, ''), coalesce(value ->> 9, '') from json_each(?)
  where (value ->> 3) + (value ->> 4) + (value ->> 5) + coalesce(value ->> 6, 0) + coalesce(value ->> 7, 0) > 0
  on conflict (account_id, month, key_id, model, end_user) do update set ${ADD_USE}`;

export class SqliteUsage {
  constructor(private readonly sql: SqliteDatabase) {}

  /** The statements that record a batch, for one write transaction (the store's writeOffLoop). */
  writes(uses: readonly KeyUse[]): Write[] {
    const keyUses = JSON.stringify(uses.map((use) => [use.keyId, use.requests, use.promptTokens, use.completionTokens, instant(use.at)]));
    const dayUses = JSON.stringify(uses.map((use) => [use.keyId, use.date, use.accountId, use.requests, use.promptTokens, use.completionTokens, use.refused, use.costNanos, use.model, use.endUser]));
    return [[RECORD_KEY_USES, [keyUses]], [RECORD_DAY_USES, [dayUses]], [RECORD_LEDGER_USES, [dayUses]], [RECORD_MONTH_USES, [dayUses]]];
  }

  days(accountId: string, from: string, to: string): Promise<UsageDay[]> {
    return this.sql.read(() =>
      this.sql.all<UsageDay>(
        `select date, account_id as accountId, key_id as keyId, requests, refused, cost_nanos as costNanos, prompt_tokens as promptTokens, completion_tokens as completionTokens
         from chatgate_usage_daily where account_id = ? and date between ? and ? order by date, key_id`,
        accountId,
        from,
        to,
      ),
    );
  }

  breakdown(accountId: string, from: string, to: string, query: BreakdownQuery): Promise<UsageShare[]> {
    const group = query.by === 'model' ? 'model' : 'end_user';
    const spans = ledgerSpans(from, to, new Date().toISOString().slice(0, 10));
    const filters = 'account_id = @account and (@key is null or key_id = @key) and (@endUser is null or end_user = @endUser)';
    const dayRanges = spans.days.map((_, i) => `date between @from${i} and @to${i}`).join(' or ');
    const columns = `${group} as "group", requests, refused, cost_nanos, prompt_tokens, completion_tokens`;
    return this.sql.read(() =>
      this.sql.all<UsageShare>(
        `select "group", sum(requests) as requests, sum(refused) as refused, sum(cost_nanos) as costNanos, sum(prompt_tokens) as promptTokens, sum(completion_tokens) as completionTokens
         from (
           select ${columns} from chatgate_usage_ledger_monthly where ${filters} and month in (select value from json_each(@months))
           ${dayRanges ? `union all select ${columns} from chatgate_usage_ledger where ${filters} and (${dayRanges})` : ''}
         )
         group by "group" order by costNanos desc, promptTokens + completionTokens desc, requests desc, 1 limit @limit`,
        {
          account: accountId,
          key: query.keyId ?? null,
          endUser: query.endUser ?? null,
          months: JSON.stringify(spans.months),
          limit: query.limit,
          ...Object.fromEntries(spans.days.flatMap((span, i) => [[`from${i}`, span.from], [`to${i}`, span.to]])),
        },
      ),
    );
  }

  /** Whole months only: a month's sums stay those of its days. */
  prune(before: string, limit: number): Promise<number> {
    const until = monthStart(before);
    return this.sql.write(() => {
      let deleted = this.sql.run(`delete from chatgate_usage_ledger where (${LEDGER_KEY}) in (select ${LEDGER_KEY} from chatgate_usage_ledger where date < ? limit ?)`, until, limit).changes;
      if (deleted < limit) deleted += this.sql.run('delete from chatgate_usage_daily where rowid in (select rowid from chatgate_usage_daily where date < ? limit ?)', until, limit - deleted).changes;
      const monthKey = LEDGER_KEY.replace('date', 'month');
      if (deleted < limit) deleted += this.sql.run(`delete from chatgate_usage_ledger_monthly where (${monthKey}) in (select ${monthKey} from chatgate_usage_ledger_monthly where month < ? limit ?)`, until, limit - deleted).changes;
      return deleted;
    });
  }
}
