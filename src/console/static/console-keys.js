/*
 * The console's Keys tab: the account's keys, and creating, editing, rotating and revoking them. A new
 * or rotated key's secret is shown once and erased from the page when dismissed.
 */
import { $, formatNumber, formatDate, formatDateTime, utcDay, el, cell, setError, banner, copyText, formatAmount, confirmDialog } from './console-dom.js';
import { state, api, busy, can, keyStatus } from './console-state.js';
import { loadAlerts } from './console-alerts.js';
import { renderUsageKeyOptions } from './console-usage.js';

const DAY_MS = 86_400_000;

function limitsText(key) {
  const parts = [];
  const limits = key.rateLimit || {};
  const describe = (value, unit) => {
    if (value === null || value === undefined) return;
    parts.push(value === 0 ? `no ${unit} limit` : `${formatNumber(value)} ${unit}`);
  };
  describe(limits.requestsPerMinute, 'req/min');
  describe(limits.tokensPerMinute, 'tokens/min');
  describe(limits.maxConcurrent, 'concurrent');
  const quota = key.quota || {};
  if (quota.tokensPerDay !== null && quota.tokensPerDay !== undefined) parts.push(`${formatNumber(quota.tokensPerDay)} tokens/day`);
  if (quota.tokensPerMonth !== null && quota.tokensPerMonth !== undefined) parts.push(`${formatNumber(quota.tokensPerMonth)} tokens/month`);
  const budget = key.budget || {};
  if (budget.perDay !== null && budget.perDay !== undefined) parts.push(`budget ${formatAmount(budget.perDay)}/day`);
  if (budget.perMonth !== null && budget.perMonth !== undefined) parts.push(`budget ${formatAmount(budget.perMonth)}/month`);
  return parts.length > 0 ? parts : ['defaults'];
}

export async function loadKeys() {
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

const WEEK_MS = 7 * DAY_MS;

/** "expires in 3 days" for a key that expires within a week (rotate it, or give it a later expiry); else ''. */
function expiresSoon(key) {
  if (!key.expiresAt) return '';
  const left = Date.parse(key.expiresAt) - Date.now();
  if (left <= 0 || left > WEEK_MS) return '';
  const days = Math.floor(left / DAY_MS);
  return days === 0 ? 'expires within a day' : `expires in ${days} day${days === 1 ? '' : 's'}`;
}

function keyActions(key, status, allowed) {
  const box = el('span', { className: 'row-actions' });
  if (status === 'revoked') return box;
  if (!allowed.manageKey(key)) {
    box.append(el('span', { className: 'muted small', text: 'view only', attrs: { title: 'Only its creator or an owner may change this key.' } }));
    return box;
  }
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

async function onKeyAction(action, key, button) {
  if (action === 'edit') return openEdit(key);
  if (action === 'rotate') {
    const ok = await confirmDialog({
      title: `Rotate key “${key.name}”?`,
      text: 'A new secret is made for this key, with the same settings. Every program using the current secret must be given the new one before the current one stops working.',
      confirm: 'Rotate key',
      grace: true,
    });
    if (!ok) return;
    const graceSeconds = Number($('confirm-grace').value);
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

/** The clear key, shown once: erased from the page when dismissed, signed out or replaced. */
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

// Reading the key forms

const splitModels = (text) => text.split(',').map((m) => m.trim()).filter((m) => m.length > 0);
/** The ticked endpoints of a form's fieldset (none ticked: every endpoint, an empty list). */
const tickedEndpoints = (id) => Array.from($(id).querySelectorAll('input[name="endpoints"]')).filter((box) => box.checked).map((box) => box.value);
const tickEndpoints = (id, endpoints) => {
  for (const box of $(id).querySelectorAll('input[name="endpoints"]')) box.checked = endpoints.includes(box.value);
};

/** A whole number from a number input; null when empty; throws a message when not a whole number. */
function wholeNumber(input, label) {
  if (input.validity?.badInput) throw new Error(`${label} must be a whole number (0 or more).`);
  const text = input.value.trim();
  if (text === '') return null;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${label} must be a whole number (0 or more).`);
  return value;
}

const LIMIT_FIELDS = [
  ['requestsPerMinute', 'rpm', 'Requests per minute'],
  ['tokensPerMinute', 'tpm', 'Tokens per minute'],
  ['maxConcurrent', 'concurrent', 'Concurrent requests'],
];
const QUOTA_FIELDS = [
  ['tokensPerDay', 'per-day', 'Tokens per day'],
  ['tokensPerMonth', 'per-month', 'Tokens per month'],
];
const BUDGET_FIELDS = [
  ['perDay', 'budget-day', 'Budget per day'],
  ['perMonth', 'budget-month', 'Budget per month'],
];
/** The fields of a key's groups, and how each reads its input. */
const GROUPS = [['rateLimit', LIMIT_FIELDS, wholeNumber], ['quota', QUOTA_FIELDS, wholeNumber], ['budget', BUDGET_FIELDS, amount]];

/** An amount of the price table's currency (0 or more, decimals allowed), or null when empty. */
function amount(input, label) {
  const text = input.value.trim();
  const value = Number(text);
  if ((input.validity?.badInput) || (text !== '' && !(Number.isFinite(value) && value >= 0))) throw new Error(`${label} must be an amount (0 or more).`);
  return text === '' ? null : value;
}


function expiryFrom(input) {
  const day = input.value;
  if (!day) return null;
  if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) throw new Error('The expiry must be a date.');
  if (day <= utcDay(Date.now())) throw new Error('The expiry must be a day after today (UTC).');
  return `${day}T00:00:00.000Z`;
}

async function onCreateKey(event) {
  event.preventDefault();
  const errorBox = $('create-key-error');
  setError(errorBox, null);
  const body = {};
  try {
    const name = $('create-name').value.trim();
    if (!name) throw new Error('Give the key a name.');
    body.name = name;
    const models = splitModels($('create-models').value);
    if (models.length > 0) body.models = models;
    const endpoints = tickedEndpoints('create-endpoints');
    if (endpoints.length > 0) body.endpoints = endpoints;
    const allowedIps = splitModels($('create-allowed-ips').value);
    if (allowedIps.length > 0) body.allowedIps = allowedIps;
    const expiresAt = expiryFrom($('create-expires'));
    if (expiresAt) body.expiresAt = expiresAt;
    for (const [group, fields, read] of GROUPS) {
      for (const [field, id, label] of fields) {
        const value = read($(`create-${id}`), label);
        if (value !== null) {
          body[group] = body[group] || {};
          body[group][field] = value;
        }
      }
    }
  } catch (error) {
    setError(errorBox, error);
    return;
  }
  await busy($('create-key-submit'), async () => {
    const created = await api('POST', '/keys', body);
    $('create-key-form').reset();
    $('create-key-form').hidden = true;
    showSecret(created.key, `New key “${created.name}”`);
    await loadKeys();
  }, (error) => setError(errorBox, error));
}

function openEdit(key) {
  state.editing = key;
  const form = $('edit-key-form');
  form.reset();
  setError($('edit-error'), null);
  $('edit-title').textContent = `Edit key “${key.name}”`;
  $('edit-name').value = key.name;
  $('edit-models').value = (key.models || []).join(', ');
  tickEndpoints('edit-endpoints', key.endpoints || []);
  $('edit-allowed-ips').value = (key.allowedIps || []).join(', ');
  $('edit-expires').value = key.expiresAt ? key.expiresAt.slice(0, 10) : '';
  for (const [group, fields] of GROUPS) for (const [field, id] of fields) $(`edit-${id}`).value = key[group] && key[group][field] !== null && key[group][field] !== undefined ? String(key[group][field]) : '';
  $('edit-dialog').showModal();
  $('edit-name').focus();
}

async function onEditKey(event) {
  event.preventDefault();
  const key = state.editing;
  if (!key) return;
  const errorBox = $('edit-error');
  setError(errorBox, null);
  const changes = {};
  try {
    const name = $('edit-name').value.trim();
    if (!name) throw new Error('Give the key a name.');
    if (name !== key.name) changes.name = name;
    const models = splitModels($('edit-models').value);
    if (models.join(',') !== (key.models || []).join(',')) changes.models = models;
    const endpoints = tickedEndpoints('edit-endpoints');
    if (endpoints.join(',') !== (key.endpoints || []).join(',')) changes.endpoints = endpoints;
    const allowedIps = splitModels($('edit-allowed-ips').value);
    if (allowedIps.join(',') !== (key.allowedIps || []).join(',')) changes.allowedIps = allowedIps;
    const expiresDay = $('edit-expires').value;
    if (expiresDay !== (key.expiresAt ? key.expiresAt.slice(0, 10) : '')) changes.expiresAt = expiryFrom($('edit-expires'));
    for (const [group, fields, read] of GROUPS) {
      for (const [field, id, label] of fields) {
        const value = read($(`edit-${id}`), label);
        const before = key[group] ? key[group][field] : null;
        if (value !== (before === undefined ? null : before)) {
          changes[group] = changes[group] || {};
          changes[group][field] = value;
        }
      }
    }
  } catch (error) {
    setError(errorBox, error);
    return;
  }
  if (Object.keys(changes).length === 0) {
    $('edit-dialog').close();
    return;
  }
  await busy($('edit-save'), async () => {
    const saved = await api('PATCH', `/keys/${encodeURIComponent(key.id)}`, changes);
    $('edit-dialog').close();
    state.editing = null;
    banner(`Key “${saved.name}” is saved.`, 'success');
    await loadKeys();
  }, (error) => setError(errorBox, error));
}

export function wireKeys() {
  $('new-key-button').addEventListener('click', () => {
    const form = $('create-key-form');
    form.hidden = false;
    setError($('create-key-error'), null);
    $('create-expires').min = utcDay(Date.now() + DAY_MS);
    $('create-name').focus();
  });
  $('create-key-cancel').addEventListener('click', () => {
    $('create-key-form').reset();
    $('create-key-form').hidden = true;
    $('new-key-button').focus();
  });
  $('create-key-form').addEventListener('submit', onCreateKey);
  $('secret-copy').addEventListener('click', () => copyText($('secret-value').textContent, $('secret-value'), $('secret-copy-state')));
  $('secret-done').addEventListener('click', () => {
    hideSecret();
    $('new-key-button').focus();
  });

  $('edit-key-form').addEventListener('submit', onEditKey);
  $('edit-cancel').addEventListener('click', () => $('edit-dialog').close());
  $('edit-dialog').addEventListener('close', () => {
    state.editing = null;
  });
}
