/**
 * The console API's routes about what happened in the current account (api.ts adds them last): its
 * quota, budget and leak alerts, its usage by day (JSON and CSV) and broken down by model or end
 * user, and its audit trail (the owners').
 */
import type { Router } from 'express';
import { allowed } from '../accounts/roles';
import { breakdownCsv, breakdownQuery, dateRange, shareRow, usageCsv, usageRow } from '../accounts/usage';
import { amountOf } from '../accounts/prices';
import { errors } from '../errors';
import type { Store } from '../store/types';
import { actorOf, may } from './api-access';

export function usageRoutes(api: Router, store: Store, currency: () => string): void {
  // The account's quota and budget alerts of the current UTC day and month (its keys' too), newest first.
  api.get('/alerts', async (_req, res) => {
    const { accountId, signedIn } = may(res, 'usage.read');
    const owners = allowed(actorOf(signedIn), signedIn.role, 'audit.read'); // leak reports (where a key was found) are the owners'
    const today = new Date().toISOString().slice(0, 10);
    const alerts = await store.listAlerts(accountId, new Date(`${today.slice(0, 7)}-01T00:00:00Z`));
    // Keys that expire soon are said on their rows (the Keys tab), not here.
    const current = alerts.filter((alert) => alert.kind !== 'key.expiring' && (alert.periodStart === today || alert.periodStart === today.slice(0, 7)));
    // Keys revoked as leaked in the last 7 days (the audit trail's key.leaked), with where they were found.
    const weekAgo = new Date(Date.now() - 7 * 86_400_000).toISOString();
    const leaks = !owners ? [] : (await store.listAudit(accountId, 100, { action: 'key.leaked', since: weekAgo }))
      .map((event) => ({ keyId: event.target, at: event.at, ...(typeof event.details?.url === 'string' ? { url: event.details.url } : {}) }));
    res.json({ object: 'list', currency: currency(), data: current.map(({ id: _id, accountId: _account, sentAt: _sent, ...shown }) => shown), leaks });
  });

  api.get('/usage', async (req, res) => {
    const { accountId, account } = may(res, 'usage.read');
    const { from, to } = dateRange(req.query.from, req.query.to);
    const days = await usageOf(store, accountId, from, to, req.query.keyId);
    // Spend against the budget (the key's when one is chosen, else the account's), this UTC day and month.
    const today = new Date().toISOString().slice(0, 10);
    const month = await usageOf(store, accountId, `${today.slice(0, 7)}-01`, today, req.query.keyId);
    // Only an id of a key's shape reaches the store (PostgreSQL refuses some bytes in text with an error of its own).
    const keyId = req.query.keyId;
    if (keyId !== undefined && (typeof keyId !== 'string' || !/^key_[A-Za-z0-9_-]{1,64}$/.test(keyId))) throw errors.invalidBody('keyId', "'keyId' must be a key's id (key_...).");
    const key = keyId === undefined ? undefined : await store.get(keyId);
    const budget = key?.accountId === accountId ? key.budget : account.budget;
    const spent = (rows: typeof month) => amountOf(rows.reduce((sum, row) => sum + row.costNanos, 0));
    res.json({
      object: 'list',
      from,
      to,
      currency: currency(),
      data: days.map(usageRow).map(({ accountId: _account, ...row }) => row),
      budget: { ...budget, spentToday: spent(month.filter((row) => row.date === today)), spentThisMonth: spent(month) },
    });
  });

  api.get('/usage.csv', async (req, res) => {
    const { accountId, account } = may(res, 'usage.read');
    const { from, to } = dateRange(req.query.from, req.query.to);
    const names = new Map((await store.list(accountId)).map((key) => [key.id, key.name]));
    res.setHeader('Content-Type', 'text/csv; charset=utf-8');
    res.setHeader('Content-Disposition', `attachment; filename="usage-${account.name.replace(/[^A-Za-z0-9._-]/g, '_')}-${from}-${to}.csv"`);
    res.send(usageCsv(await usageOf(store, accountId, from, to, req.query.keyId), names));
  });

  // By model or by end user over the days (accounts/usage.ts: breakdownQuery), largest first; and as CSV.
  api.get('/usage/breakdown', async (req, res) => {
    const { accountId } = may(res, 'usage.read');
    const { from, to, query } = breakdownQuery(req.query, accountId);
    res.json({ object: 'list', by: query.by, from, to, currency: currency(), data: (await store.usageBreakdown(accountId, from, to, query)).map((share) => shareRow(share, query.by)) });
  });

  api.get('/usage/breakdown.csv', async (req, res) => {
    const { accountId, account } = may(res, 'usage.read');
    const { from, to, query } = breakdownQuery(req.query, accountId);
    res.setHeader('Content-Type', 'text/csv; charset=utf-8');
    res.setHeader('Content-Disposition', `attachment; filename="usage-by-${query.by}-${account.name.replace(/[^A-Za-z0-9._-]/g, '_')}-${from}-${to}.csv"`);
    res.send(breakdownCsv(await store.usageBreakdown(accountId, from, to, query), query.by));
  });

  api.get('/audit', async (_req, res) => {
    const { accountId } = may(res, 'audit.read');
    res.json({ object: 'list', data: (await store.listAudit(accountId, 500)).map(({ id, at, actor, action, target, client: from, details }) => ({ id, at, actor, action, target, client: from, details })) });
  });
}

/** The account's daily usage, of one key when `keyId` names one. */
async function usageOf(store: Store, accountId: string, from: string, to: string, keyId: unknown) {
  const days = await store.usage(accountId, from, to);
  return typeof keyId === 'string' ? days.filter((day) => day.keyId === keyId) : days;
}
