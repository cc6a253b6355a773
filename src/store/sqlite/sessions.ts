/**
 * The embedded store's console sessions and one-time tokens (set-password and sign-in links): each
 * kept by its digest only; expired ones go as new ones come; a token is deleted as it is read, so of
 * two uses at once one gets it.
 */
import type { OneTimeToken, SessionRecord } from '../types';
import type { SqliteDatabase } from './database';
import * as rows from './rows';
import type { SessionRow, TokenRow } from './rows';
import * as statements from './statements';

export class SqliteSessions {
  constructor(private readonly sql: SqliteDatabase) {}

  async createSession(record: SessionRecord): Promise<void> {
    await this.sql.write(() => {
      this.sql.run('delete from chatgate_sessions where expires_at < ?', new Date().toISOString()); // ended ones go as new ones come
      this.sql.run(rows.insertSql('insert', 'chatgate_sessions', statements.SESSION_COLUMNS), rows.sessionParams(record));
    });
  }

  findSession(digest: string): Promise<SessionRecord | undefined> {
    return this.sql.read(() => {
      const row = this.sql.get<SessionRow>('select * from chatgate_sessions where digest = ?', digest);
      return row && rows.toSession(row);
    });
  }

  async updateSession(digest: string, changes: { lastSeenAt?: string; accountId?: string | null }): Promise<void> {
    await this.sql.write(() =>
      this.sql.run(
        'update chatgate_sessions set last_seen_at = coalesce(?, last_seen_at), account_id = case when ? then ? else account_id end where digest = ?',
        rows.maybeInstant(changes.lastSeenAt),
        changes.accountId !== undefined ? 1 : 0,
        changes.accountId ?? null,
        digest,
      ),
    );
  }

  async deleteSession(digest: string): Promise<void> {
    await this.sql.write(() => this.sql.run('delete from chatgate_sessions where digest = ?', digest));
  }

  deleteSessionsOf(email: string, exceptDigest?: string): Promise<number> {
    return this.sql.write(() => this.sql.run('delete from chatgate_sessions where email = ? and digest is not ?', email, exceptDigest ?? null).changes);
  }

  async createToken(token: OneTimeToken): Promise<void> {
    // One step: expired tokens and, for a set-password link, the person's older links go as it comes.
    await this.sql.write(() => {
      this.sql.run('delete from chatgate_tokens where expires_at < ?', new Date().toISOString());
      if (token.kind === 'password' && token.email !== null) this.sql.run("delete from chatgate_tokens where kind = 'password' and email = ?", token.email);
      this.sql.run(rows.insertSql('insert', 'chatgate_tokens', statements.TOKEN_COLUMNS), rows.tokenParams(token));
    });
  }

  takeToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    // Deleted as it is read: of two uses at once, one gets it; a set-password link takes its siblings with it.
    return this.sql.write(() => {
      const row = this.sql.get<TokenRow>('delete from chatgate_tokens where digest = ? and kind = ? returning *', digest, kind);
      if (!row) return undefined;
      if (row.kind === 'password' && row.email !== null) this.sql.run("delete from chatgate_tokens where kind = 'password' and email = ?", row.email);
      return rows.liveToken(row, now);
    });
  }

  findToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    return this.sql.read(() => {
      const row = this.sql.get<TokenRow>('select * from chatgate_tokens where digest = ? and kind = ?', digest, kind);
      return rows.liveToken(row, now);
    });
  }
}
