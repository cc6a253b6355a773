/**
 * The PostgreSQL schema's first seven migrations (migrations.ts applies them with the rest, in order):
 * the keys and their NOTIFY trigger, accounts and what belongs to them, the usage totals apart from
 * the key rows, and the key change log. Never edited: a database that applied one keeps it.
 */
import { CHANNEL } from './channel';

export const FIRST_MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  {
    version: 1,
    sql: `
      create table chatgate_keys (
        id text primary key,
        name text not null,
        digest text not null,
        prefix text not null,
        created_at timestamptz not null,
        revoked_at timestamptz,
        expires_at timestamptz,
        models text[] not null default '{}',
        last_used_at timestamptz
      );
      create unique index chatgate_keys_digest on chatgate_keys (digest);
      create function chatgate_keys_notify() returns trigger language plpgsql as $$
      begin
        if tg_op = 'INSERT' then
          perform pg_notify('${CHANNEL}', new.digest);
        else
          perform pg_notify('${CHANNEL}', old.digest);
          if tg_op = 'UPDATE' and new.digest <> old.digest then
            perform pg_notify('${CHANNEL}', new.digest);
          end if;
        end if;
        return null;
      end $$;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models on chatgate_keys
        for each row execute function chatgate_keys_notify();
    `,
  },
  {
    version: 2,
    sql: `
      alter table chatgate_keys
        add column rpm integer,
        add column tpm integer,
        add column max_concurrent integer,
        add column requests_total bigint not null default 0,
        add column prompt_tokens_total bigint not null default 0,
        add column completion_tokens_total bigint not null default 0;
      drop trigger chatgate_keys_changed on chatgate_keys;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models, rpm, tpm, max_concurrent on chatgate_keys
        for each row execute function chatgate_keys_notify();
    `,
  },
  {
    // Accounts, their members, the console's sessions and one-time tokens, sign-in throttling, the
    // audit trail (append-only: a trigger refuses changes), daily usage and quota counters. Every key
    // made before this belongs to the account `default`.
    version: 3,
    sql: `
      create table chatgate_accounts (
        id text primary key,
        name text not null unique,
        created_at timestamptz not null,
        tokens_per_day bigint,
        tokens_per_month bigint
      );
      insert into chatgate_accounts (id, name, created_at) values ('acc_default', 'default', now());
      alter table chatgate_keys
        add column account_id text not null default 'acc_default' references chatgate_accounts (id),
        add column created_by text not null default 'admin-token',
        add column tokens_per_day bigint,
        add column tokens_per_month bigint;
      alter table chatgate_keys alter column account_id drop default;
      create index chatgate_keys_account on chatgate_keys (account_id);
      drop trigger chatgate_keys_changed on chatgate_keys;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models, rpm, tpm, max_concurrent, account_id, tokens_per_day, tokens_per_month
        on chatgate_keys for each row execute function chatgate_keys_notify();
      create table chatgate_people (
        email text primary key,
        admin boolean not null default false,
        password_hash text,
        created_at timestamptz not null
      );
      create table chatgate_members (
        account_id text not null references chatgate_accounts (id) on delete cascade,
        email text not null references chatgate_people (email) on delete cascade,
        role text not null check (role in ('owner', 'member')),
        added_at timestamptz not null,
        added_by text not null,
        primary key (account_id, email)
      );
      create index chatgate_members_email on chatgate_members (email);
      create table chatgate_sessions (
        digest text primary key,
        email text not null,
        account_id text,
        via text not null,
        created_at timestamptz not null,
        last_seen_at timestamptz not null,
        expires_at timestamptz not null
      );
      create table chatgate_tokens (
        digest text primary key,
        kind text not null,
        email text,
        data jsonb not null,
        expires_at timestamptz not null
      );
      create table chatgate_sign_in_failures (email text primary key, failures integer not null, since timestamptz not null);
      create table chatgate_audit (
        id text primary key,
        account_id text,
        at timestamptz not null,
        actor text not null,
        action text not null,
        target text not null,
        client text,
        details jsonb not null default '{}'
      );
      create index chatgate_audit_account_at on chatgate_audit (account_id, at desc);
      create function chatgate_audit_append_only() returns trigger language plpgsql as $$
      begin
        raise exception 'the audit trail is append-only';
      end $$;
      create trigger chatgate_audit_unchanged before update or delete on chatgate_audit
        for each row execute function chatgate_audit_append_only();
      create table chatgate_usage_daily (
        key_id text not null,
        date date not null,
        account_id text not null,
        requests bigint not null default 0,
        prompt_tokens bigint not null default 0,
        completion_tokens bigint not null default 0,
        primary key (key_id, date)
      );
      create index chatgate_usage_account_date on chatgate_usage_daily (account_id, date);
      create table chatgate_quota_usage (scope text primary key, tokens bigint not null, updated_at timestamptz not null default now());
    `,
  },
  {
    // Keys limited to some endpoints (chat, completions, embeddings, responses); empty: all.
    version: 4,
    sql: `
      alter table chatgate_keys add column endpoints text[] not null default '{}';
      drop trigger chatgate_keys_changed on chatgate_keys;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models, endpoints, rpm, tpm, max_concurrent, account_id, tokens_per_day, tokens_per_month
        on chatgate_keys for each row execute function chatgate_keys_notify();
    `,
  },
  {
    // People bound to OpenID Connect identities by issuer and subject (never by email alone); short-
    // lived counters (sign-in attempts per window) replace the per-email failure rows.
    version: 5,
    sql: `
      create table chatgate_identities (
        issuer text not null,
        subject text not null,
        email text not null references chatgate_people (email) on delete cascade,
        created_at timestamptz not null,
        primary key (issuer, subject),
        unique (issuer, email)
      );
      create index chatgate_identities_email on chatgate_identities (email);
      alter table chatgate_people add column password_with_oidc boolean not null default false;
      create table chatgate_counters (name text primary key, count integer not null, expires_at timestamptz not null);
      create index chatgate_counters_expiry on chatgate_counters (expires_at);
      drop table chatgate_sign_in_failures;
    `,
  },
  {
    // Each key's totals and last use leave its row for a small table of their own: a usage flush
    // (every auth.lastUsedFlushMs, for every key in use) no longer rewrites key rows, so the key
    // table does not bloat and the key-changed trigger never sees usage. Left sparse (fillfactor) so
    // that its updates stay on their page (HOT: no index write). The old columns stay, unread, until
    // no replica of the previous release runs (one still writing them loses nothing it served).
    version: 6,
    sql: `
      create table chatgate_key_usage (
        key_id text primary key,
        requests bigint not null default 0,
        prompt_tokens bigint not null default 0,
        completion_tokens bigint not null default 0,
        last_used_at timestamptz
      ) with (fillfactor = 70);
      insert into chatgate_key_usage (key_id, requests, prompt_tokens, completion_tokens, last_used_at)
        select id, requests_total, prompt_tokens_total, completion_tokens_total, last_used_at from chatgate_keys
        where requests_total <> 0 or prompt_tokens_total <> 0 or completion_tokens_total <> 0 or last_used_at is not null;
    `,
  },
  {
    // Key changes are logged as well as notified: a replica whose listening connection is down or
    // reconnecting reads the log every POLL_MS instead (notify.ts), so a revocation reaches it
    // within a second of the database answering, not when LISTEN is back. Pruned after 10 minutes.
    version: 7,
    sql: `
      create table chatgate_key_changes (seq bigserial primary key, digest text not null, at timestamptz not null default now());
      create index chatgate_key_changes_at on chatgate_key_changes (at);
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
        end if;
        return null;
      end $$;
    `,
  },
];
