/**
 * What a store refuses, the same on every backend: a record whose unique value (an account's name, a
 * key's digest, a session's digest) another record holds already. The backends turn their driver's
 * answer (SQLite's constraint message, PostgreSQL's SQLSTATE 23505 and constraint name) into
 * DuplicateRecord in one place each, so a caller asks `instanceof` and never reads a driver's text.
 */

/** The records whose unique values a caller may collide with. */
export type RecordKind = 'account' | 'key' | 'session' | 'token' | 'audit';

/** Another record of this kind holds this field's value already (of two inserts at once, the one that lost). */
export class DuplicateRecord extends Error {
  override name = 'DuplicateRecord';
  constructor(
    readonly kind: RecordKind,
    readonly field: string,
    message = `the store already holds ${kind === 'account' || kind === 'audit' ? 'an' : 'a'} ${kind === 'audit' ? 'audit event' : kind} with that ${field}`,
  ) {
    super(message);
  }
}

/** Another account has that name: what the API answers 409 `account_name_taken` for. */
export class AccountNameTaken extends DuplicateRecord {
  override name = 'AccountNameTaken';
  constructor(readonly accountName: string) {
    super('account', 'name', `an account is already named '${accountName}'`);
  }
}

/**
 * A change made with `{ keepOwner: true }` (putMember or setMemberRole demoting, removeMember) refused: `email` is the
 * account's only owner, and would leave it with none. Decided in the change's own transaction, so of
 * two owners demoting or removing each other at once, one is refused: what the API answers 409
 * `last_owner` for.
 */
export class LastOwner extends Error {
  override name = 'LastOwner';
  constructor(
    readonly accountId: string,
    readonly email: string,
  ) {
    super(`'${email}' is the last owner of account '${accountId}'`);
  }
}

/** The unique columns callers may collide with, by table: the kind of record and the field each is. */
const UNIQUE: Record<string, { kind: RecordKind; fields: Record<string, string> }> = {
  chatgate_accounts: { kind: 'account', fields: { id: 'id', name: 'name' } },
  chatgate_keys: { kind: 'key', fields: { id: 'id', digest: 'digest' } },
  chatgate_sessions: { kind: 'session', fields: { digest: 'digest' } },
  chatgate_tokens: { kind: 'token', fields: { digest: 'digest' } },
  chatgate_audit: { kind: 'audit', fields: { id: 'id' } },
};

/** PostgreSQL's names for those constraints (the migrations' defaults, and the digest index). */
const POSTGRES_CONSTRAINTS: Record<string, readonly [table: string, column: string]> = {
  chatgate_accounts_pkey: ['chatgate_accounts', 'id'],
  chatgate_accounts_name_key: ['chatgate_accounts', 'name'],
  chatgate_keys_pkey: ['chatgate_keys', 'id'],
  chatgate_keys_digest: ['chatgate_keys', 'digest'],
  chatgate_sessions_pkey: ['chatgate_sessions', 'digest'],
  chatgate_tokens_pkey: ['chatgate_tokens', 'digest'],
  chatgate_audit_pkey: ['chatgate_audit', 'id'],
};

function duplicateIn(table: string, column: string): DuplicateRecord | undefined {
  const unique = UNIQUE[table];
  const field = unique?.fields[column];
  return unique && field ? new DuplicateRecord(unique.kind, field) : undefined;
}

/** SQLite's unique violation (`UNIQUE constraint failed: chatgate_accounts.name`) as a DuplicateRecord; undefined for any other error. */
export function sqliteDuplicate(err: unknown): DuplicateRecord | undefined {
  const failed = /^UNIQUE constraint failed: (\w+)\.(\w+)$/.exec(String((err as Error | null)?.message ?? ''));
  return failed ? duplicateIn(failed[1]!, failed[2]!) : undefined;
}

/** PostgreSQL's unique violation (SQLSTATE 23505, with the constraint it broke) as a DuplicateRecord; undefined for any other error. */
export function postgresDuplicate(err: unknown): DuplicateRecord | undefined {
  const { code, constraint } = (err ?? {}) as { code?: unknown; constraint?: unknown };
  const broken = code === '23505' && typeof constraint === 'string' ? POSTGRES_CONSTRAINTS[constraint] : undefined;
  return broken && duplicateIn(...broken);
}

/** The account name a DuplicateRecord of an account's name stands for, as the error the API answers; anything else unchanged. */
export function withAccountName(err: unknown, name: string | undefined): unknown {
  return err instanceof DuplicateRecord && !(err instanceof AccountNameTaken) && err.kind === 'account' && err.field === 'name' && name !== undefined ? new AccountNameTaken(name) : err;
}
