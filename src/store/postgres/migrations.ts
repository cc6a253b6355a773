/**
 * The PostgreSQL schema as versioned migrations (the first seven in migrations-1-7.ts), applied in
 * order once each, under the advisory lock that serialises them across replicas.
 */
import type pg from 'pg';
import { CHANNEL } from './channel';
import { FIRST_MIGRATIONS } from './migrations-1-7';

/** Arbitrary, fixed: the advisory lock that serialises migrations across replicas. */
const MIGRATION_LOCK = 7_462_301;

export const MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  ...FIRST_MIGRATIONS,
  {
    // Keys usable only from some client addresses (CIDRs); empty: any. A change is a key change.
    version: 8,
    sql: `
      alter table chatgate_keys add column allowed_ips text[] not null default '{}';
      drop trigger chatgate_keys_changed on chatgate_keys;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models, endpoints, allowed_ips, rpm, tpm, max_concurrent, account_id, tokens_per_day, tokens_per_month
        on chatgate_keys for each row execute function chatgate_keys_notify();
    `,
  },
  {
    // Daily usage counts the requests the gateway refused itself apart from those a worker answered,
    // and what the answers cost by the price table (nano-units of its currency: whole numbers add up exactly).
    version: 9,
    sql: `alter table chatgate_usage_daily add column refused bigint not null default 0, add column cost_nanos bigint not null default 0;`,
  },
  {
    // The usage batches recorded, by id: a batch whose write outlived our deadline and landed anyway
    // is skipped when it is sent again, rather than counted twice. Kept a day.
    version: 10,
    sql: `create table chatgate_usage_batches (id text primary key, at timestamptz not null default now());
      create index chatgate_usage_batches_at on chatgate_usage_batches (at);`,
  },
  {
    // Budgets of keys and accounts, per UTC day and month, in nano-units of the price table's
    // currency (null: none). A key's budget changing is a key change (its cached record goes).
    version: 11,
    sql: `
      alter table chatgate_keys add column budget_day_nanos bigint, add column budget_month_nanos bigint;
      alter table chatgate_accounts add column budget_day_nanos bigint, add column budget_month_nanos bigint;
      drop trigger chatgate_keys_changed on chatgate_keys;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models, endpoints, allowed_ips, rpm, tpm, max_concurrent, account_id, tokens_per_day, tokens_per_month, budget_day_nanos, budget_month_nanos
        on chatgate_keys for each row execute function chatgate_keys_notify();
    `,
  },
  {
    // Rotation with grace: the secret a rotation replaced (its digest) works until previous_until,
    // while the key's secret is still the one that rotation made (previous_for): any later change of
    // secret, by whatever version of chatgate, ends the grace. A key change announces the replaced
    // digest too, so that no cache holds it past a revocation, an edit or its end.
    version: 12,
    sql: `
      alter table chatgate_keys add column previous_digest text, add column previous_until timestamptz, add column previous_for text;
      create index chatgate_keys_previous_digest on chatgate_keys (previous_digest) where previous_digest is not null;
      create or replace function chatgate_keys_notify() returns trigger language plpgsql as $$
      begin
        if tg_op = 'INSERT' then
          perform pg_notify('${CHANNEL}', new.digest);
          insert into chatgate_key_changes (digest) values (new.digest);
        else
          perform pg_notify('${CHANNEL}', old.digest);
          insert into chatgate_key_changes (digest) values (old.digest);
          if tg_op = 'UPDATE' and new.digest <> old.digest then
            perform pg_notify('${CHANNEL}', new.digest);
            insert into chatgate_key_changes (digest) values (new.digest);
          end if;
          if old.previous_digest is not null then
            perform pg_notify('${CHANNEL}', old.previous_digest);
            insert into chatgate_key_changes (digest) values (old.previous_digest);
          end if;
        end if;
        return null;
      end $$;
      drop trigger chatgate_keys_changed on chatgate_keys;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models, endpoints, allowed_ips, rpm, tpm, max_concurrent, account_id, tokens_per_day, tokens_per_month, budget_day_nanos, budget_month_nanos, previous_digest, previous_until
        on chatgate_keys for each row execute function chatgate_keys_notify();
    `,
  },
  {
    // Thresholds of quotas and budgets crossed, one row per threshold per period: the replica that
    // claims it sends it (a claim unsent past its lease may be taken over), the console shows it.
    version: 13,
    sql: `
      create table chatgate_alerts (
        id text primary key,
        account_id text not null,
        key_id text,
        kind text not null,
        period text not null,
        period_start text not null,
        threshold double precision not null,
        spent double precision not null,
        lim double precision not null,
        at timestamptz not null,
        claimed_until timestamptz not null,
        sent_at timestamptz
      );
      create index chatgate_alerts_account_at on chatgate_alerts (account_id, at);
    `,
  },
  {
    // An account's key policy: the longest its keys may live, in days from their creation (null: no
    // limit); keys that expire soon are found by their expiry (key.expiring alerts).
    version: 14,
    sql: `
      alter table chatgate_accounts add column key_max_lifetime_days integer;
      create index chatgate_keys_expires_at on chatgate_keys (expires_at) where expires_at is not null;
    `,
  },
  {
    // The ledger: usage a day, key, model and end user (the end user's digest, '' for none), written by
    // the same statement as the daily rows, so that breakdowns add up to them. Days before it began
    // come over as they were, with no model and no end user. Its key leads with the account and the
    // day: an account's days are one range of the index. Old days go by date (usage.retentionDays).
    // The same rows summed by month (month: its first day): a breakdown over a month reads a row a
    // key, model and end user, not one a day of each (ledger-spans.ts).
    version: 15,
    sql: `
      create table chatgate_usage_ledger (
        account_id text not null,
        date date not null,
        key_id text not null,
        model text not null,
        end_user text not null,
        requests bigint not null default 0,
        refused bigint not null default 0,
        prompt_tokens bigint not null default 0,
        completion_tokens bigint not null default 0,
        cost_nanos bigint not null default 0,
        primary key (account_id, date, key_id, model, end_user)
      );
      create index chatgate_usage_ledger_date on chatgate_usage_ledger (date);
      create index chatgate_usage_daily_date on chatgate_usage_daily (date);
      create table chatgate_usage_ledger_monthly (like chatgate_usage_ledger including defaults);
      alter table chatgate_usage_ledger_monthly rename column date to month;
      alter table chatgate_usage_ledger_monthly add primary key (account_id, month, key_id, model, end_user);
      insert into chatgate_usage_ledger (account_id, date, key_id, model, end_user, requests, refused, prompt_tokens, completion_tokens, cost_nanos)
        select account_id, date, key_id, '', '', requests, refused, prompt_tokens, completion_tokens, cost_nanos from chatgate_usage_daily;
      insert into chatgate_usage_ledger_monthly (account_id, month, key_id, model, end_user, requests, refused, prompt_tokens, completion_tokens, cost_nanos)
        select account_id, date_trunc('month', date)::date, key_id, model, end_user, sum(requests), sum(refused), sum(prompt_tokens), sum(completion_tokens), sum(cost_nanos)
        from chatgate_usage_ledger group by 1, 2, 3, 4, 5;
    `,
  },
  {
    // What each end user of an account may use per UTC day: tokens, and money in nano-units (null: no limit).
    version: 16,
    sql: `alter table chatgate_accounts add column end_user_tokens_per_day bigint, add column end_user_budget_day_nanos bigint;`,
  },
  {
    // Secrets the gateway makes for itself (the client tokens' signing keys, one a day).
    version: 17,
    sql: `create table chatgate_server_secrets (id text primary key, secret text not null, created_at timestamptz not null);`,
  },
  // Where an account's alerts go, set by its owners (null: the platform's alerts.webhookUrl).
  { version: 18, sql: `alter table chatgate_accounts add column alert_webhook_url text;` },
];

/** Applies the migrations not applied yet, in one transaction under the advisory lock (replicas starting together apply each once). */
export async function migrate(pool: pg.Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    // A migration runs once and may rewrite a big table (6 copies the usage of up to a million keys:
    // 4 s here): not bound by the per-query timeout, which would fail every start until it fits.
    await client.query('set local statement_timeout = 0');
    await client.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query('create table if not exists chatgate_schema_migrations (version integer primary key, applied_at timestamptz not null default now())');
    const { rows } = await client.query<{ version: number }>('select version from chatgate_schema_migrations');
    const applied = new Set(rows.map((row) => row.version));
    for (const migration of MIGRATIONS) {
      if (applied.has(migration.version)) continue;
      await client.query(migration.sql);
      await client.query('insert into chatgate_schema_migrations (version) values ($1)', [migration.version]);
    }
    await client.query('commit');
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}
