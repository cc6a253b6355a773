/**
 * The audit trail: every sign-in (and failed one), key created, rotated, edited or revoked, member
 * added or removed, quota changed. Each event is appended to the store with its account (append-only:
 * PostgreSQL refuses changes to it) and written as a log line (`"log":"audit"`), so that it reaches
 * the operator's log pipeline even when the store cannot take it.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from '../telemetry/log';
import type { AccountStore, AuditEvent } from '../store/types';

export interface AuditInput {
  accountId: string | null;
  actor: string;
  action: string;
  target: string;
  client: string | null | undefined;
  details?: Record<string, unknown>;
}

export class Auditor {
  constructor(
    private readonly store: Pick<AccountStore, 'appendAudit'>,
    private readonly log: Logger,
    private readonly now: () => Date = () => new Date(),
  ) {}

  async record(input: AuditInput): Promise<AuditEvent> {
    const event: AuditEvent = {
      id: `evt_${randomBytes(9).toString('base64url')}`,
      accountId: input.accountId,
      at: this.now().toISOString(),
      actor: input.actor,
      action: input.action,
      target: input.target,
      client: input.client ?? null,
      details: input.details ?? {},
    };
    this.log.info({ log: 'audit', ...event }, 'audit');
    try {
      await this.store.appendAudit(event);
    } catch (err) {
      this.log.error({ log: 'audit', eventId: event.id, err: (err as Error).message }, 'the audit event could not be stored; it is in this log');
    }
    return event;
  }
}
