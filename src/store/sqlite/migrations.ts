/**
 * The embedded store's schema, as versioned migrations (like PostgreSQL's, src/store/postgres/migrations.ts):
 * each applied once, in order, in one immediate transaction, so two processes opening a new file
 * at once apply each once. Timestamps are ISO 8601 text in UTC (as Date.toISOString writes them, so
 * they sort as text), dates YYYY-MM-DD, lists and objects JSON text, booleans 0 or 1.
 */
import { immediate, type SqlConnection } from './driver';

export const MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  {
    version: 1,
    sql: `
      create table chatgate_accounts (
        id text primary key,
        name text not null unique,
        created_at text not null,
        tokens_per_day integer,
        tokens_per_month integer
      );
      create table chatgate_keys (
        id text primary key,
        name text not null,
        digest text not null unique,
        prefix text not null,
        created_at text not null,
        revoked_at text,
        expires_at text,
        models text not null default '[]',
        endpoints text not null default '[]',
        rpm integer,
        tpm integer,
        max_concurrent integer,
        account_id text not null references chatgate_accounts (id),
        created_by text not null,
        tokens_per_day integer,
        tokens_per_month integer
      );
      create index chatgate_keys_account on chatgate_keys (account_id, created_at);
      create index chatgate_keys_created on chatgate_keys (created_at, id);
      -- Each key's totals and last use, written in batches, apart from the key (as in PostgreSQL): a
      -- usage flush touches no key row, and announces no key change.
      create table chatgate_key_usage (
        key_id text primary key references chatgate_keys (id) on delete cascade,
        requests integer not null default 0,
        prompt_tokens integer not null default 0,
        completion_tokens integer not null default 0,
        last_used_at text
      );

      -- The digests of changed keys, in order: every process reads what came after what it saw, so a
      -- key revoked by the CLI leaves a running gateway's cache within one poll. Written by triggers,
      -- whoever changes a key.
      create table chatgate_key_changes (seq integer primary key autoincrement, digest text not null, at text not null);
      create trigger chatgate_keys_inserted after insert on chatgate_keys begin
        insert into chatgate_key_changes (digest, at) values (new.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
      end;
      create trigger chatgate_keys_deleted after delete on chatgate_keys begin
        insert into chatgate_key_changes (digest, at) values (old.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
      end;
      create trigger chatgate_keys_updated
        after update of name, digest, revoked_at, expires_at, models, endpoints, rpm, tpm, max_concurrent, account_id, created_by, tokens_per_day, tokens_per_month
        on chatgate_keys begin
        insert into chatgate_key_changes (digest, at) values (old.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
        insert into chatgate_key_changes (digest, at) select new.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where new.digest <> old.digest;
      end;

      create table chatgate_people (
        email text primary key,
        admin integer not null default 0,
        password_hash text,
        created_at text not null,
        password_with_oidc integer not null default 0
      );
      create table chatgate_identities (
        issuer text not null,
        subject text not null,
        email text not null references chatgate_people (email) on delete cascade,
        created_at text not null,
        primary key (issuer, subject),
        unique (issuer, email)
      );
      create index chatgate_identities_email on chatgate_identities (email);
      create table chatgate_members (
        account_id text not null references chatgate_accounts (id) on delete cascade,
        email text not null references chatgate_people (email) on delete cascade,
        role text not null check (role in ('owner', 'member')),
        added_at text not null,
        added_by text not null,
        primary key (account_id, email)
      );
      create index chatgate_members_email on chatgate_members (email);
      create table chatgate_sessions (
        digest text primary key,
        email text not null,
        account_id text,
        via text not null,
        created_at text not null,
        last_seen_at text not null,
        expires_at text not null
      );
      create index chatgate_sessions_email on chatgate_sessions (email);
      create index chatgate_sessions_expiry on chatgate_sessions (expires_at);
      create table chatgate_tokens (
        digest text primary key,
        kind text not null,
        email text,
        data text not null,
        expires_at text not null
      );
      create index chatgate_tokens_email on chatgate_tokens (email, kind);
      create index chatgate_tokens_expiry on chatgate_tokens (expires_at);
      create table chatgate_counters (name text primary key, count integer not null, expires_at text not null);
      create index chatgate_counters_expiry on chatgate_counters (expires_at);

      -- Append-only: triggers refuse to change or delete an event.
      create table chatgate_audit (
        seq integer primary key autoincrement,
        id text not null unique,
        account_id text,
        at text not null,
        actor text not null,
        action text not null,
        target text not null,
        client text,
        details text not null default '{}'
      );
      create index chatgate_audit_account_at on chatgate_audit (account_id, at);
      create index chatgate_audit_at on chatgate_audit (at);
      create trigger chatgate_audit_no_update before update on chatgate_audit begin
        select raise(abort, 'the audit trail is append-only');
      end;
      create trigger chatgate_audit_no_delete before delete on chatgate_audit begin
        select raise(abort, 'the audit trail is append-only');
      end;

      create table chatgate_usage_daily (
        key_id text not null,
        date text not null,
        account_id text not null,
        requests integer not null default 0,
        prompt_tokens integer not null default 0,
        completion_tokens integer not null default 0,
        primary key (key_id, date)
      );
      create index chatgate_usage_account_date on chatgate_usage_daily (account_id, date);
      -- A quota counter's scope ends with its period (...:d:2026-11-27, ...:m:2026-11): kept apart to prune by.
      create table chatgate_quota_usage (scope text primary key, period text not null, tokens integer not null);
      create index chatgate_quota_usage_period on chatgate_quota_usage (period);
    `,
  },
  {
    // Keys usable only from some client addresses (CIDRs, a JSON array); empty: any. A change is a key change.
    version: 2,
    sql: `
      alter table chatgate_keys add column allowed_ips text not null default '[]';
      drop trigger chatgate_keys_updated;
      create trigger chatgate_keys_updated
        after update of name, digest, revoked_at, expires_at, models, endpoints, allowed_ips, rpm, tpm, max_concurrent, account_id, created_by, tokens_per_day, tokens_per_month
        on chatgate_keys begin
        insert into chatgate_key_changes (digest, at) values (old.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
        insert into chatgate_key_changes (digest, at) select new.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where new.digest <> old.digest;
      end;
    `,
  },
  {
    // Daily usage counts the requests the gateway refused itself apart from those a worker answered,
    // and what the answers cost by the price table (nano-units of its currency: whole numbers add up exactly).
    version: 3,
    sql: `
      alter table chatgate_usage_daily add column refused integer not null default 0;
      alter table chatgate_usage_daily add column cost_nanos integer not null default 0;
    `,
  },
  {
    // The usage batches recorded, by id: one sent again is skipped rather than counted twice. Kept a day.
    version: 4,
    sql: `
      create table chatgate_usage_batches (id text primary key, at text not null);
      create index chatgate_usage_batches_at on chatgate_usage_batches (at);
    `,
  },
  {
    // Budgets of keys and accounts, per UTC day and month, in nano-units of the price table's
    // currency (null: none). A key's budget changing is a key change (its cached record goes).
    version: 5,
    sql: `
      alter table chatgate_keys add column budget_day_nanos integer;
      alter table chatgate_keys add column budget_month_nanos integer;
      alter table chatgate_accounts add column budget_day_nanos integer;
      alter table chatgate_accounts add column budget_month_nanos integer;
      drop trigger chatgate_keys_updated;
      create trigger chatgate_keys_updated
        after update of name, digest, revoked_at, expires_at, models, endpoints, allowed_ips, rpm, tpm, max_concurrent, account_id, created_by, tokens_per_day, tokens_per_month, budget_day_nanos, budget_month_nanos
        on chatgate_keys begin
        insert into chatgate_key_changes (digest, at) values (old.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
        insert into chatgate_key_changes (digest, at) select new.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where new.digest <> old.digest;
      end;
    `,
  },
  {
    // Rotation with grace: the secret a rotation replaced (its digest) works until previous_until,
    // while the key's secret is still the one that rotation made (previous_for): any later change of
    // secret, by whatever version of chatgate, ends the grace. A key change announces the replaced
    // digest too, so that no cache holds it past a revocation, an edit or its end.
    version: 6,
    sql: `
      alter table chatgate_keys add column previous_digest text;
      alter table chatgate_keys add column previous_until text;
      alter table chatgate_keys add column previous_for text;
      create index chatgate_keys_previous_digest on chatgate_keys (previous_digest) where previous_digest is not null;
      drop trigger chatgate_keys_updated;
      create trigger chatgate_keys_updated
        after update of name, digest, revoked_at, expires_at, models, endpoints, allowed_ips, rpm, tpm, max_concurrent, account_id, created_by, tokens_per_day, tokens_per_month, budget_day_nanos, budget_month_nanos, previous_digest, previous_until
        on chatgate_keys begin
        insert into chatgate_key_changes (digest, at) values (old.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
        insert into chatgate_key_changes (digest, at) select new.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where new.digest <> old.digest;
        insert into chatgate_key_changes (digest, at) select old.previous_digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where old.previous_digest is not null;
      end;
      drop trigger chatgate_keys_deleted;
      create trigger chatgate_keys_deleted after delete on chatgate_keys begin
        insert into chatgate_key_changes (digest, at) values (old.digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
        insert into chatgate_key_changes (digest, at) select old.previous_digest, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where old.previous_digest is not null;
      end;
    `,
  },
  {
    // Thresholds of quotas and budgets crossed, one row per threshold per period: the replica that
    // claims it sends it (a claim unsent past its lease may be taken over), the console shows it.
    version: 7,
    sql: `
      create table chatgate_alerts (
        id text primary key,
        account_id text not null,
        key_id text,
        kind text not null,
        period text not null,
        period_start text not null,
        threshold real not null,
        spent real not null,
        lim real not null,
        at text not null,
        claimed_until text not null,
        sent_at text
      );
      create index chatgate_alerts_account_at on chatgate_alerts (account_id, at);
    `,
  },
  {
    // An account's key policy: the longest its keys may live, in days from their creation (null: no
    // limit); keys that expire soon are found by their expiry (key.expiring alerts).
    version: 8,
    sql: `
      alter table chatgate_accounts add column key_max_lifetime_days integer;
      create index chatgate_keys_expires_at on chatgate_keys (expires_at) where expires_at is not null;
    `,
  },
  {
    // The ledger: usage a day, key, model and end user, and the same summed by month (as in PostgreSQL's migration 15).
    version: 9,
    sql: `
      create table chatgate_usage_ledger (
        account_id text not null,
        date text not null,
        key_id text not null,
        model text not null,
        end_user text not null,
        requests integer not null default 0,
        refused integer not null default 0,
        prompt_tokens integer not null default 0,
        completion_tokens integer not null default 0,
        cost_nanos integer not null default 0,
        primary key (account_id, date, key_id, model, end_user)
      ) without rowid;
      create index chatgate_usage_ledger_date on chatgate_usage_ledger (date);
      create index chatgate_usage_daily_date on chatgate_usage_daily (date);
      create table chatgate_usage_ledger_monthly (
        account_id text not null,
        month text not null,
        key_id text not null,
        model text not null,
        end_user text not null,
        requests integer not null default 0,
        refused integer not null default 0,
        prompt_tokens integer not null default 0,
        completion_tokens integer not null default 0,
        cost_nanos integer not null default 0,
        primary key (account_id, month, key_id, model, end_user)
      ) without rowid;
      insert into chatgate_usage_ledger (account_id, date, key_id, model, end_user, requests, refused, prompt_tokens, completion_tokens, cost_nanos)
        select account_id, date, key_id, '', '', requests, refused, prompt_tokens, completion_tokens, cost_nanos from chatgate_usage_daily;
      insert into chatgate_usage_ledger_monthly (account_id, month, key_id, model, end_user, requests, refused, prompt_tokens, completion_tokens, cost_nanos)
        select account_id, substr(date, 1, 7) || '-01', key_id, model, end_user, sum(requests), sum(refused), sum(prompt_tokens), sum(completion_tokens), sum(cost_nanos)
        from chatgate_usage_ledger group by 1, 2, 3, 4, 5;
    `,
  },
  {
    // What each end user of an account may use per UTC day (as in PostgreSQL's migration 16).
    version: 10,
    sql: `
      alter table chatgate_accounts add column end_user_tokens_per_day integer;
      alter table chatgate_accounts add column end_user_budget_day_nanos integer;
    `,
  },
  {
    // Secrets the gateway makes for itself (as in PostgreSQL's migration 17).
    version: 11,
    sql: `create table chatgate_server_secrets (id text primary key, secret text not null, created_at text not null);`,
  },
  {
    // Where an account's alerts go, set by its owners (as in PostgreSQL's migration 18).
    version: 12,
    sql: `alter table chatgate_accounts add column alert_webhook_url text;`,
  },
];

/** Applies the migrations this file lacks; true when it made the schema (a new database). */
export function migrate(db: SqlConnection): boolean {
  return immediate(db, () => {
    db.exec('create table if not exists chatgate_schema_migrations (version integer primary key, applied_at text not null)');
    const applied = new Set((db.prepare('select version from chatgate_schema_migrations').all() as Array<{ version: number }>).map((row) => row.version));
    const record = db.prepare('insert into chatgate_schema_migrations (version, applied_at) values (?, ?)');
    for (const migration of MIGRATIONS) {
      if (applied.has(migration.version)) continue;
      db.exec(migration.sql);
      record.run(migration.version, new Date().toISOString());
    }
    return applied.size === 0;
  });
}
