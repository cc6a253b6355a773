/**
 * The PostgreSQL store's member changes that keep an account's last owner (putMember and
 * removeMember with `keepOwner`, and every setMemberRole; queries.ts makes the others). Each is one
 * transaction that first locks the account's row (`for no key update`: it waits for another such
 * change of the account, and for nothing else, not even a member added meanwhile), then (with
 * `keepOwner`) looks at the owners, and changes the member.
 * Of two owners demoting or removing each other at once, on one replica or two, the second waits
 * for the first to commit; under READ COMMITTED its next statement reads what the first left, and it
 * is refused with LastOwner. (A single statement would not do: its subqueries read the snapshot taken
 * when it began, before the other committed.)
 */
import type pg from 'pg';
import { LastOwner, postgresDuplicate } from '../errors';
import { StoreDeadlineExceeded } from '../guarded';
import type { MembershipRecord, Role, RoleChange } from '../types';
import { type MemberRow, memberParams, toMember } from '../sql/rows';
import { queryWithin } from './query';
import { insertSql } from './rows';

type Query = <R extends pg.QueryResultRow>(sql: string, params: unknown[]) => Promise<pg.QueryResult<R>>;

/** A row when `$2` is an owner of account `$1` and no other member is one. */
const ONLY_OWNER = `select 1 from chatgate_members where account_id = $1 and email = $2 and role = 'owner'
  and not exists (select 1 from chatgate_members where account_id = $1 and role = 'owner' and email <> $2)`;

/** The role of the member `$2` of account `$1`, the row locked until the transaction ends: what a role change replaces. */
const ROLE_FOR_UPDATE = 'select role from chatgate_members where account_id = $1 and email = $2 for no key update';

/** putMember, refusing (LastOwner) to make the account's only owner a member. */
export function putMemberKeepingOwner(pool: pg.Pool, timeoutMs: number, record: MembershipRecord): Promise<MembershipRecord> {
  return keepingOwner(pool, timeoutMs, record.accountId, record.role === 'owner' ? undefined : record.email, async (query) => {
    const params = memberParams(record);
    const { rows } = await query<MemberRow>(`${insertSql('chatgate_members', params)} on conflict (account_id, email) do update set role = excluded.role returning *`, Object.values(params));
    return toMember(rows[0]!);
  });
}

/**
 * setMemberRole: an update, never an insert, so a change that comes after the member's removal finds
 * nobody (undefined) and brings nobody back. The role it replaces is read with the row locked, so of
 * two changes at once the second reads what the first left. With `keepOwner`, refusing (LastOwner)
 * to make the account's only owner a member.
 */
export function setMemberRole(pool: pg.Pool, timeoutMs: number, accountId: string, email: string, role: Role, keepOwner: boolean): Promise<RoleChange | undefined> {
  return keepingOwner(pool, timeoutMs, accountId, keepOwner && role !== 'owner' ? email : undefined, async (query) => {
    const before = (await query<{ role: Role }>(ROLE_FOR_UPDATE, [accountId, email])).rows[0];
    if (!before) return undefined;
    const { rows } = await query<MemberRow>('update chatgate_members set role = $3 where account_id = $1 and email = $2 returning *', [accountId, email, role]);
    return { member: toMember(rows[0]!), from: before.role };
  });
}

/** removeMember, refusing (LastOwner) to remove the account's only owner. */
export function removeMemberKeepingOwner(pool: pg.Pool, timeoutMs: number, accountId: string, email: string): Promise<boolean> {
  return keepingOwner(pool, timeoutMs, accountId, email, async (query) => {
    const { rowCount } = await query('delete from chatgate_members where account_id = $1 and email = $2', [accountId, email]);
    return (rowCount ?? 0) > 0;
  });
}

/**
 * `change` in one transaction, after the account's row is locked and `leaving` (who stops being an
 * owner, if anyone) is found not to be its only owner. Every statement has our deadline; a connection
 * stuck behind one, or that cannot roll back, is ended, never pooled mid-transaction.
 */
async function keepingOwner<T>(pool: pg.Pool, timeoutMs: number, accountId: string, leaving: string | undefined, change: (query: Query) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let stuck: StoreDeadlineExceeded | undefined;
  const query: Query = async (sql, params) => {
    try {
      return await queryWithin(client, sql, params, timeoutMs);
    } catch (err) {
      if (err instanceof StoreDeadlineExceeded) stuck = err;
      throw postgresDuplicate(err) ?? err;
    }
  };
  try {
    await query('begin', []);
    await query('select 1 from chatgate_accounts where id = $1 for no key update', [accountId]);
    if (leaving !== undefined && (await query(ONLY_OWNER, [accountId, leaving])).rowCount) throw new LastOwner(accountId, leaving);
    const result = await change(query);
    await query('commit', []);
    client.release();
    return result;
  } catch (err) {
    const ended = stuck ?? (await query('rollback', []).then(() => undefined, (rollbackErr: unknown) => (rollbackErr instanceof Error ? rollbackErr : new Error(String(rollbackErr)))));
    client.release(ended);
    throw err;
  }
}
