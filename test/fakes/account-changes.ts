/** Pure: an account with changes applied, and an audit listing's filter, as the SQL stores apply them; the fakes share them. */
import { definedFields } from '../../src/common/defined-fields';
import type { AccountChanges, AccountRecord, AuditEvent, AuditFilter } from '../../src/store/types';

export const auditKept = (event: AuditEvent, accountId: string | null, filter: AuditFilter) =>
  (accountId === null || event.accountId === accountId) && (filter.action === undefined || event.action === filter.action) && (filter.since === undefined || event.at >= new Date(filter.since).toISOString());

export function accountChanged(existing: AccountRecord, changes: AccountChanges): AccountRecord {
  const updated: AccountRecord = { ...existing, ...definedFields({ name: changes.name }), quota: { ...existing.quota, ...definedFields(changes.quota) }, budget: { ...existing.budget, ...definedFields(changes.budget) } };
  if (changes.keyPolicy === null) delete updated.keyPolicy;
  else if (changes.keyPolicy !== undefined) updated.keyPolicy = { ...changes.keyPolicy };
  if (changes.endUserQuota === null) delete updated.endUserQuota;
  else if (changes.endUserQuota !== undefined) updated.endUserQuota = { ...changes.endUserQuota };
  if (changes.alertWebhookUrl === null) delete updated.alertWebhookUrl;
  else if (changes.alertWebhookUrl !== undefined) updated.alertWebhookUrl = changes.alertWebhookUrl;
  return updated;
}

/** Accounts as the SQL stores list them: by creation time, then id. */
export const byCreation = (a: AccountRecord, b: AccountRecord) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** Audit events as the SQL stores list them: the latest `at` first, and of one instant, the last appended first. */
export function newestFirst(events: readonly AuditEvent[]): AuditEvent[] {
  return [...events].reverse().sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : 0));
}
