// @ts-check
/*
 * The account's alerts (GET /console/api/alerts), shown above the tabs: keys revoked as leaked in the
 * last 7 days first, then the highest threshold reached of each quota and budget of the current UTC
 * day and month. The same are POSTed to the platform's webhook, when it has one (docs/configuration.md).
 */
import { $, el } from './console-dom.js';
import { highestPerLimit, alertText } from './console-format.js';
import { state, api } from './console-state.js';

/** @typedef {import('./console-types.js').Alert} Alert */
/** @typedef {import('./console-types.js').Leak} Leak */

/** Reads the account's alerts and shows them (nothing shown when there are none, or they cannot be read). */
export async function loadAlerts() {
  /** @type {{ data: Alert[], currency?: string, leaks?: Leak[] }} */
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

/** @param {Alert[]} alerts @param {string | undefined} currency @param {Leak[]} leaks */
function showAlerts(alerts, currency, leaks) {
  const names = new Map(state.keys.map((key) => [key.id, key.name]));
  const items = [
    ...leaks.map((leak) => el('li', { text: `Key “${names.get(leak.keyId) || leak.keyId}” was found in public${leak.url ? ` (${leak.url})` : ''} on ${leak.at.slice(0, 10)} and is revoked: programs using it need a new key.`, attrs: { 'data-testid': 'alert-item', 'data-kind': 'leak' } })),
    // One line per limit: its highest threshold reached.
    ...highestPerLimit(alerts).map((alert) => el('li', { text: alertText(alert, alert.keyId ? names.get(alert.keyId) || alert.keyId : null, currency), attrs: { 'data-testid': 'alert-item' } })),
  ];
  $('alerts-list').replaceChildren(...items);
  $('alerts-banner').hidden = items.length === 0;
}
