/*
 * The account's alerts (GET /console/api/alerts), shown above the tabs: keys revoked as leaked in the
 * last 7 days first, then the highest threshold reached of each quota and budget of the current UTC
 * day and month. The same are POSTed to the platform's webhook, when it has one (docs/configuration.md).
 */
import { $, el, formatAmount, formatNumber } from './console-dom.js';
import { state, api } from './console-state.js';

/** Reads the account's alerts and shows them (nothing shown when there are none, or they cannot be read). */
export async function loadAlerts() {
  let list;
  try {
    list = await api('GET', '/alerts');
  } catch {
    return; // the banner is a courtesy: the usage tab says the same
  }
  showAlerts(list.data, list.currency, list.leaks || []);
}

export function hideAlerts() {
  $('alerts-list').replaceChildren();
  $('alerts-banner').hidden = true;
}

function showAlerts(alerts, currency, leaks) {
  // One line per limit: its highest threshold reached (the list is newest first, so keep the highest).
  const byLimit = new Map();
  for (const alert of alerts) {
    const limit = `${alert.kind}:${alert.keyId || ''}:${alert.period}`;
    const seen = byLimit.get(limit);
    if (!seen || alert.threshold > seen.threshold) byLimit.set(limit, alert);
  }
  const names = new Map(state.keys.map((key) => [key.id, key.name]));
  const items = [
    ...leaks.map((leak) => el('li', { text: `Key “${names.get(leak.keyId) || leak.keyId}” was found in public${leak.url ? ` (${leak.url})` : ''} on ${leak.at.slice(0, 10)} and is revoked: programs using it need a new key.`, attrs: { 'data-testid': 'alert-item', 'data-kind': 'leak' } })),
    ...[...byLimit.values()].map((alert) => el('li', { text: alertText(alert, alert.keyId ? names.get(alert.keyId) || alert.keyId : null, currency), attrs: { 'data-testid': 'alert-item' } })),
  ];
  $('alerts-list').replaceChildren(...items);
  $('alerts-banner').hidden = items.length === 0;
}

function alertText(alert, keyName, currency) {
  const money = alert.kind === 'budget';
  const amount = (n) => (money ? `${formatAmount(n)} ${currency || ''}`.trim() : `${formatNumber(Math.round(n))} tokens`);
  const whose = keyName ? `Key “${keyName}”` : 'This account';
  const what = `${alert.period === 'day' ? 'daily' : 'monthly'} ${money ? 'budget' : 'token quota'}`;
  return `${whose} has used ${Math.round(alert.threshold * 100)}% of its ${what}: ${amount(alert.spent)} of ${amount(alert.limit)} (${alert.periodStart}, UTC).`;
}
