/** The embedded store's longer statements and column lists (store.ts runs them; what a change sets is ../sql/updates.ts). */

/** Adds to quota counters in one statement: `?` is a JSON array of [scope, period, tokens]. */
export const ADD_QUOTA_USAGE = `insert into chatgate_quota_usage as q (scope, period, tokens)
  select value ->> 0, value ->> 1, value ->> 2 from json_each(?) where true
  on conflict (scope) do update set tokens = q.tokens + excluded.tokens`;

/** Quota counters' totals in one statement: `?` is a JSON array of scopes (a scope never counted has no row). */
export const QUOTA_USAGE = 'select scope, tokens from chatgate_quota_usage where scope in (select value from json_each(?))';

/** One counter, made at 1 with its expiry, or counted up while it lasts (an expired one starts again). */
export const BUMP_COUNTER = `insert into chatgate_counters as c (name, count, expires_at) values (@name, 1, @expiresAt)
  on conflict (name) do update set
    count = case when c.expires_at > @now then c.count + 1 else 1 end,
    expires_at = case when c.expires_at > @now then c.expires_at else excluded.expires_at end
  returning count`;

/** A row when `@email` is an owner of account `@accountId` and no other member is one: taking that role away would leave none. */
export const ONLY_OWNER = `select 1 from chatgate_members where account_id = @accountId and email = @email and role = 'owner'
  and not exists (select 1 from chatgate_members where account_id = @accountId and role = 'owner' and email <> @email)`;

export const ACCOUNT_COLUMNS = ['id', 'name', 'created_at', 'tokens_per_day', 'tokens_per_month', 'budget_day_nanos', 'budget_month_nanos', 'key_max_lifetime_days', 'end_user_tokens_per_day', 'end_user_budget_day_nanos', 'alert_webhook_url'];
export const IDENTITY_COLUMNS = ['issuer', 'subject', 'email', 'created_at'];
export const MEMBER_COLUMNS = ['account_id', 'email', 'role', 'added_at', 'added_by'];
export const SESSION_COLUMNS = ['digest', 'email', 'account_id', 'via', 'created_at', 'last_seen_at', 'expires_at'];
export const TOKEN_COLUMNS = ['digest', 'kind', 'email', 'data', 'expires_at'];
export const AUDIT_COLUMNS = ['id', 'account_id', 'at', 'actor', 'action', 'target', 'client', 'details'];
