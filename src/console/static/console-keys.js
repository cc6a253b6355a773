// @ts-check
/*
 * The console's Keys tab: the account's keys, and creating, editing, rotating and revoking them. A new
 * or rotated key's secret is shown once and erased from the page when dismissed.
 */
import { $, el, cell, banner, copyText, confirmDialog } from './console-dom.js';
import { formatDate, formatDateTime, keyStatus, limitsText, expiresSoon } from './console-format.js';
import { state, api, busy, can } from './console-state.js';
import { loadAlerts } from './console-alerts.js';
import { renderUsageKeyOptions } from './console-usage.js';
import { openKeyForm, wireKeyForm } from './console-key-form.js';

/** @typedef {import('./console-types.js').Key} Key */

export async function loadKeys() {
  /** @type {import('./console-types.js').List<Key> | undefined} */
  const list = await busy(null, () => api('GET', '/keys'));
  if (!list) return;
  state.keys = list.data.slice().sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
  renderKeys();
  renderUsageKeyOptions();
  loadAlerts(); // they name keys: read once the keys are
}

function renderKeys() {
  const allowed = can();
  const body = $('keys-body');
  body.replaceChildren();
  for (const key of state.keys) {
    const status = keyStatus(key);
    const row = el('tr', { className: `key-row status-${status}`, attrs: { 'data-testid': 'key-row', 'data-key-id': key.id, 'data-key-name': key.name } });
    row.append(
      cell('Name', el('span', { className: 'key-name', text: key.name, attrs: { 'data-testid': 'key-name' } }), 'cell-title'),
      cell('Key', el('code', { className: 'prefix', text: `${key.prefix}…`, attrs: { 'data-testid': 'key-prefix' } })),
      cell('Created', el('span', {}, el('span', { text: formatDate(key.createdAt), attrs: { title: key.createdAt } }), el('span', { className: 'sub', text: `by ${key.createdBy}`, attrs: { 'data-testid': 'key-created-by' } }))),
      cell('Last used', key.lastUsedAt ? el('span', { text: formatDateTime(key.lastUsedAt), attrs: { title: key.lastUsedAt, 'data-testid': 'key-last-used' } }) : el('span', { className: 'muted', text: 'never', attrs: { 'data-testid': 'key-last-used' } })),
      cell(
        'Expires',
        el(
          'span',
          {},
          key.expiresAt ? el('span', { text: `${formatDate(key.expiresAt, true)} (UTC)`, attrs: { title: key.expiresAt, 'data-testid': 'key-expires' } }) : el('span', { className: 'muted', text: 'never', attrs: { 'data-testid': 'key-expires' } }),
          status === 'active' && expiresSoon(key) ? el('span', { className: 'sub expiring', text: expiresSoon(key), attrs: { 'data-testid': 'key-expiring' } }) : null,
        ),
      ),
      cell(
        'Status',
        el(
          'span',
          {},
          el('span', { className: `status status-${status}`, text: status, attrs: { 'data-testid': 'key-status' } }),
          status === 'active' && key.previousKeyExpiresAt ? el('span', { className: 'sub', text: `old secret until ${formatDateTime(key.previousKeyExpiresAt)}`, attrs: { title: key.previousKeyExpiresAt, 'data-testid': 'key-previous-secret' } }) : null,
        ),
      ),
      cell(
        'Models',
        el(
          'span',
          {},
          key.models && key.models.length > 0 ? el('span', { className: 'models', text: key.models.join(', '), attrs: { 'data-testid': 'key-models' } }) : el('span', { className: 'muted', text: 'all', attrs: { 'data-testid': 'key-models' } }),
          key.endpoints && key.endpoints.length > 0 ? el('span', { className: 'sub', text: `only ${key.endpoints.join(', ')}`, attrs: { 'data-testid': 'key-endpoints' } }) : null,
          key.allowedIps && key.allowedIps.length > 0 ? el('span', { className: 'sub', text: `from ${key.allowedIps.join(', ')}`, attrs: { 'data-testid': 'key-allowed-ips' } }) : null,
        ),
      ),
      cell('Limits', el('span', { className: 'limits-list' }, ...limitsText(key).map((text) => el('span', { text })))),
      cell('Actions', keyActions(key, status, allowed), 'cell-actions'),
    );
    body.append(row);
  }
  $('keys-empty').hidden = state.keys.length > 0;
  $('keys-table').hidden = state.keys.length === 0;
}

/** @param {Key} key @param {'revoked' | 'expired' | 'active'} status @param {ReturnType<typeof can>} allowed */
function keyActions(key, status, allowed) {
  const box = el('span', { className: 'row-actions' });
  if (status === 'revoked') return box;
  if (!allowed.manageKey(key)) {
    box.append(el('span', { className: 'muted small', text: 'view only', attrs: { title: 'Only its creator or an owner may change this key.' } }));
    return box;
  }
  /** @param {string} text @param {string} action @param {string} className */
  const button = (text, action, className) => {
    const b = el('button', { className: `small ${className}`, text, attrs: { type: 'button', 'data-action': action, 'data-testid': `key-${action}`, 'aria-label': `${text} key ${key.name}` } });
    b.addEventListener('click', () => onKeyAction(action, key, b));
    return b;
  };
  box.append(button('Edit', 'edit', 'secondary'));
  if (status === 'active') box.append(button('Rotate', 'rotate', 'secondary'));
  box.append(button('Revoke', 'revoke', 'danger-outline'));
  return box;
}

/** @param {string} action @param {Key} key @param {HTMLButtonElement} button */
async function onKeyAction(action, key, button) {
  if (action === 'edit') return openKeyForm(key);
  if (action === 'rotate') {
    const ok = await confirmDialog({
      title: `Rotate key “${key.name}”?`,
      text: 'A new secret is made for this key, with the same settings. Every program using the current secret must be given the new one before the current one stops working.',
      confirm: 'Rotate key',
      grace: true,
    });
    if (!ok) return;
    const graceSeconds = Number($('confirm-grace', HTMLSelectElement).value);
    await busy(button, async () => {
      const rotated = await api('POST', `/keys/${encodeURIComponent(key.id)}/rotate`, graceSeconds > 0 ? { graceSeconds } : undefined);
      showSecret(rotated.key, `New secret for “${rotated.name}”`, rotated.previousKeyExpiresAt);
      await loadKeys();
    });
  }
  if (action === 'revoke') {
    const ok = await confirmDialog({
      title: `Revoke key “${key.name}”?`,
      text: 'The key stops working at once, for good. This cannot be undone.',
      confirm: 'Revoke key',
    });
    if (!ok) return;
    await busy(button, async () => {
      const revoked = await api('POST', `/keys/${encodeURIComponent(key.id)}/revoke`);
      banner(`Key “${revoked.name}” is revoked.`, 'success');
      await loadKeys();
    });
  }
  return undefined;
}

/**
 * The clear key, shown once: erased from the page when dismissed, signed out or replaced.
 * @param {string} secret @param {string} title @param {string | null} [previousKeyExpiresAt]
 */
function showSecret(secret, title, previousKeyExpiresAt = null) {
  $('secret-title').textContent = title;
  $('secret-value').textContent = secret;
  $('secret-grace').hidden = !previousKeyExpiresAt;
  $('secret-grace').textContent = previousKeyExpiresAt ? `The old secret keeps working until ${formatDateTime(previousKeyExpiresAt)}.` : '';
  $('secret-copy-state').textContent = '';
  $('secret-panel').hidden = false;
  $('secret-panel').scrollIntoView({ block: 'nearest' });
  $('secret-copy').focus();
}

export function hideSecret() {
  $('secret-value').textContent = '';
  $('secret-grace').textContent = '';
  $('secret-grace').hidden = true;
  $('secret-copy-state').textContent = '';
  $('secret-panel').hidden = true;
}

export function wireKeys() {
  $('new-key-button').addEventListener('click', () => openKeyForm(null));
  wireKeyForm({
    created: async (created) => {
      showSecret(/** @type {string} */ (created.key), `New key “${created.name}”`);
      await loadKeys();
    },
    saved: loadKeys,
  });
  $('secret-copy').addEventListener('click', () => copyText($('secret-value').textContent || '', $('secret-value'), $('secret-copy-state')));
  $('secret-done').addEventListener('click', () => {
    hideSecret();
    $('new-key-button').focus();
  });
}
