/**
 * The embedded store's alerts: a threshold of a quota or budget crossed in one period, one row each.
 * A claim is one write: the row made, or an unsent one whose claim's lease ran out taken over; so of
 * two processes claiming at once, one gets it. Alerts older than ALERTS_KEPT_DAYS go as claims come.
 */
import { ALERTS_KEPT_DAYS, type AlertRecord } from '../types';
import { toAlert, type AlertRow } from '../sql/rows';
import type { SqliteDatabase } from './database';

/** Old alerts are deleted at most this often (as claims come). */
const PRUNE_EVERY_MS = 60_000;

export class SqliteAlerts {
  private prunedAt = -Infinity;

  constructor(private readonly sql: SqliteDatabase) {}

  claim(alert: AlertRecord, leaseMs: number, now: Date): Promise<boolean> {
    const until = new Date(now.getTime() + leaseMs).toISOString();
    return this.sql.write(() => {
      if (now.getTime() - this.prunedAt >= PRUNE_EVERY_MS) {
        this.prunedAt = now.getTime();
        this.sql.run('delete from chatgate_alerts where at < ?', new Date(now.getTime() - ALERTS_KEPT_DAYS * 86_400_000).toISOString());
      }
      return (
        this.sql.run(
          `insert into chatgate_alerts (id, account_id, key_id, kind, period, period_start, threshold, spent, lim, at, claimed_until)
           values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           on conflict (id) do update set claimed_until = excluded.claimed_until where sent_at is null and claimed_until < ?`,
          alert.id, alert.accountId, alert.keyId, alert.kind, alert.period, alert.periodStart, alert.threshold, alert.spent, alert.limit, new Date(alert.at).toISOString(), until, now.toISOString(),
        ).changes > 0
      );
    });
  }

  async sent(id: string, at: Date): Promise<void> {
    await this.sql.write(() => this.sql.run('update chatgate_alerts set sent_at = coalesce(sent_at, ?) where id = ?', at.toISOString(), id));
  }

  unsent(now: Date): Promise<AlertRecord[]> {
    return this.sql.read(() => this.sql.all<AlertRow>('select * from chatgate_alerts where sent_at is null and claimed_until < ? order by at, id limit 100', now.toISOString()).map(toAlert));
  }

  list(accountId: string, since: Date): Promise<AlertRecord[]> {
    return this.sql.read(() => this.sql.all<AlertRow>('select * from chatgate_alerts where account_id = ? and at >= ? order by at desc, id', accountId, since.toISOString()).map(toAlert));
  }
}
