// chatgate's key console: plain JavaScript over the admin API (/admin/api). The admin token lives in
// sessionStorage for this tab only.
'use strict';

const api = '/admin/api';
const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem('chatgate-admin-token') || '';

function say(message) {
  $('status').textContent = message;
}

async function call(method, path, body) {
  const response = await fetch(api + path, {
    method,
    headers: { authorization: 'Bearer ' + token, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error((payload.error && payload.error.message) || 'Request failed (' + response.status + ')');
    error.status = response.status;
    throw error;
  }
  return payload;
}

function show(signedIn) {
  $('sign-in').hidden = signedIn;
  $('keys-view').hidden = !signedIn;
  $('sign-out').hidden = !signedIn;
}

function statusOf(key) {
  if (key.revokedAt) return 'revoked';
  if (key.expiresAt && Date.parse(key.expiresAt) <= Date.now()) return 'expired';
  return 'active';
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : '—';
}

function cell(row, text, className) {
  const td = document.createElement('td');
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

async function refresh() {
  const { data } = await call('GET', '/keys');
  const body = $('keys').querySelector('tbody');
  body.replaceChildren();
  for (const key of data) {
    const row = document.createElement('tr');
    row.dataset.id = key.id;
    const status = statusOf(key);
    cell(row, key.name);
    cell(row, key.prefix + '…');
    cell(row, when(key.createdAt));
    cell(row, when(key.lastUsedAt));
    cell(row, status, 'status-' + status);
    cell(row, key.models.length ? key.models.join(', ') : 'all');
    const actions = cell(row, '');
    if (status === 'active') {
      const revoke = document.createElement('button');
      revoke.type = 'button';
      revoke.className = 'danger';
      revoke.textContent = 'Revoke';
      revoke.setAttribute('aria-label', 'Revoke key ' + key.name);
      revoke.addEventListener('click', () => revokeKey(key));
      actions.appendChild(revoke);
    }
    body.appendChild(row);
  }
  if (data.length === 0) say('No keys yet: create one below.');
}

async function revokeKey(key) {
  if (!confirm('Revoke the key "' + key.name + '" (' + key.prefix + '…)? Clients using it are refused from now on.')) return;
  try {
    await call('POST', '/keys/' + encodeURIComponent(key.id) + '/revoke');
    say('Revoked "' + key.name + '".');
    await refresh();
  } catch (err) {
    say(err.message);
  }
}

$('sign-in-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  token = $('token').value;
  try {
    await refresh();
    sessionStorage.setItem('chatgate-admin-token', token);
    $('token').value = '';
    show(true);
    say('Signed in.');
  } catch (err) {
    token = '';
    say(err.status === 401 ? 'That admin token is not right.' : err.message);
  }
});

$('sign-out').addEventListener('click', () => {
  token = '';
  sessionStorage.removeItem('chatgate-admin-token');
  $('new-key').hidden = true;
  show(false);
  say('Signed out.');
});

$('create-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const models = $('new-models').value.split(',').map((m) => m.trim()).filter(Boolean);
  const expires = $('new-expires').value;
  try {
    const created = await call('POST', '/keys', {
      name: $('new-name').value,
      models,
      expiresAt: expires ? new Date(expires + 'T23:59:59Z').toISOString() : null,
    });
    $('new-key-value').textContent = created.key;
    $('new-key').hidden = false;
    $('create-form').reset();
    say('Created "' + created.name + '". Copy the key now.');
    await refresh();
  } catch (err) {
    say(err.message);
  }
});

$('copy-key').addEventListener('click', async () => {
  try {
    await navigator.clipboard.writeText($('new-key-value').textContent);
    say('Key copied to the clipboard.');
  } catch {
    say('Copy failed: select the key and copy it by hand.');
  }
});

if (token) {
  refresh().then(() => show(true), () => show(false));
} else {
  show(false);
}
