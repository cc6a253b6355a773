/**
 * The embedded store's members. A change with `keepOwner` looks at the owners and changes the member
 * in one write transaction (its lock taken first: no writer of any process changes an owner between
 * the look and the change), so of two owners demoting or removing each other at once one is refused
 * with LastOwner. setRole is an update, never an insert: a role change racing the member's removal
 * finds nobody and brings nobody back; the role it replaced is read in the same transaction.
 */
import { LastOwner } from '../errors';
import type { MembershipRecord, Role, RoleChange } from '../types';
import type { SqliteDatabase } from './database';
import * as rows from './rows';
import type { MemberRow } from './rows';
import * as statements from './statements';

export class SqliteMembers {
  constructor(private readonly sql: SqliteDatabase) {}

  put(record: MembershipRecord, options: { keepOwner?: boolean } = {}): Promise<MembershipRecord> {
    return this.sql.write(() => {
      if (options.keepOwner && record.role !== 'owner') this.keepAnOwner(record.accountId, record.email);
      const sql = `${rows.insertSql('insert', 'chatgate_members', statements.MEMBER_COLUMNS)} on conflict (account_id, email) do update set role = excluded.role returning *`;
      return rows.toMember(this.sql.get<MemberRow>(sql, rows.memberParams(record))!);
    });
  }

  setRole(accountId: string, email: string, role: Role, options: { keepOwner?: boolean } = {}): Promise<RoleChange | undefined> {
    return this.sql.write(() => {
      const before = this.sql.get<{ role: Role }>('select role from chatgate_members where account_id = ? and email = ?', accountId, email);
      if (!before) return undefined;
      if (options.keepOwner && role !== 'owner') this.keepAnOwner(accountId, email);
      const row = this.sql.get<MemberRow>('update chatgate_members set role = ? where account_id = ? and email = ? returning *', role, accountId, email)!;
      return { member: rows.toMember(row), from: before.role };
    });
  }

  remove(accountId: string, email: string, options: { keepOwner?: boolean } = {}): Promise<boolean> {
    return this.sql.write(() => {
      if (options.keepOwner) this.keepAnOwner(accountId, email);
      return this.sql.run('delete from chatgate_members where account_id = ? and email = ?', accountId, email).changes > 0;
    });
  }

  list(accountId: string): Promise<MembershipRecord[]> {
    return this.sql.read(() => this.sql.all<MemberRow>('select * from chatgate_members where account_id = ? order by added_at, email', accountId).map(rows.toMember));
  }

  membershipsOf(email: string): Promise<MembershipRecord[]> {
    return this.sql.read(() => this.sql.all<MemberRow>('select * from chatgate_members where email = ? order by added_at, account_id', email).map(rows.toMember));
  }

  /** In a write: LastOwner when `email` is the account's only owner. */
  private keepAnOwner(accountId: string, email: string): void {
    if (this.sql.get(statements.ONLY_OWNER, { accountId, email })) throw new LastOwner(accountId, email);
  }
}
