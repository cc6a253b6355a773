/*
 * The account console: plain browser JavaScript, no build step, no framework.
 *
 * It runs under a strict Content-Security-Policy: no inline script or style, no eval. It therefore
 * builds every element with createElement / createElementNS and sets text with textContent (never
 * innerHTML: names and emails come from people), and styles only through classes in console.css.
 * The session is an HttpOnly cookie the API sets: this page never sees it. Every call is a same-origin
 * fetch(), which carries the page's Origin header on changes (the API checks it).
 */
'use strict';

(function consolePage() {
  // The page's DOM and formatting helpers and its chart (console-dom.js, loaded first).
  const { $, formatNumber, compactNumber, formatDate, formatDateTime, formatTime, utcDay, el, svg, cell, setError, banner, barChart, niceCeiling, copyText } = window.chatgateDom;
  const API = '/console/api';
  const SET_PASSWORD = '#set-password=';
  /** Where the identity provider's sign-in sends a browser it refused, with the error code. */
  const SIGN_IN_ERROR = '#sign-in-error=';
  const SIGN_IN_ERRORS = {
    oidc_sign_in_expired: 'That sign-in had expired or was already used. Sign in again.',
    oidc_sign_in_failed: 'The identity provider did not sign you in. Try again, or ask your administrator.',
    permission_denied: 'Your identity provider account is not given an account here. Ask an account owner to add you.',
    identity_provider_unavailable: 'The identity provider cannot be reached just now. Try again in a moment.',
    too_many_sign_ins: 'Too many sign-ins were started from here. Wait a minute and try again.',
  };
  const MIN_PASSWORD_LENGTH = 12;
  const USAGE_DAYS = 30;
  const DAY_MS = 86_400_000;


  /** What the page knows; everything is cleared on signing out. */
  const state = {
    session: null,
    keys: [],
    members: [],
    usage: null,
    tab: 'keys',
    loaded: { members: false, usage: false, audit: false },
    editing: null,
  };

  // ---------------------------------------------------------------------------------------------
  // Talking to the API

  class ApiError extends Error {
    constructor(status, error) {
      super((error && error.message) || `The server answered ${status}.`);
      this.status = status;
      this.code = (error && error.code) || null;
      this.param = (error && error.param) || null;
    }
  }

  /** A JSON call to the console API; errors are thrown as ApiError with the API's own message. */
  async function api(method, path, body) {
    const init = { method, credentials: 'same-origin', cache: 'no-store', headers: { accept: 'application/json' } };
    if (body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(API + path, init);
    } catch {
      throw new ApiError(0, { message: 'The console could not reach the server. Check your connection and try again.' });
    }
    if (response.status === 204) return null;
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (!response.ok) {
      const error = new ApiError(response.status, data && data.error);
      // A session that ended (signed out elsewhere, expired): back to signing in.
      if (error.code === 'not_signed_in' && state.session) signedOut('Your session has ended. Sign in again.');
      throw error;
    }
    return data;
  }

  /** Runs `work` with `button` disabled (a click is not sent twice); errors go to `onError`. */
  async function busy(button, work, onError) {
    if (button) button.disabled = true;
    try {
      return await work();
    } catch (error) {
      if (error instanceof ApiError && error.code === 'not_signed_in') return undefined;
      if (onError) onError(error);
      else banner(error.message, 'error');
      return undefined;
    } finally {
      if (button) button.disabled = false;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Views: signing in, setting a password, the console

  const VIEWS = ['loading', 'signin-view', 'set-password-view', 'no-account-view', 'app-view'];

  function showView(id) {
    for (const view of VIEWS) $(view).hidden = view !== id;
    $('session-bar').hidden = !state.session;
  }

  function showSignIn(email) {
    showView('signin-view');
    $('signin-form').reset();
    setError($('signin-error'), null);
    if (email) $('signin-email').value = email;
    (email ? $('signin-password') : $('signin-email')).focus();
  }

  function showSetPassword() {
    showView('set-password-view');
    $('set-password-form').reset();
    setError($('set-password-error'), null);
    $('new-password').focus();
  }

  const passwordToken = () => (location.hash.startsWith(SET_PASSWORD) ? decodeURIComponent(location.hash.slice(SET_PASSWORD.length)) : null);

  function clearHash() {
    history.replaceState(null, '', location.pathname + location.search);
  }

  /** Everything shown of the signed-in person's account is removed. */
  function forget() {
    state.session = null;
    state.keys = [];
    state.members = [];
    state.usage = null;
    state.loaded = { members: false, usage: false, audit: false };
    hideSecret();
    hideInvite();
    for (const id of ['keys-body', 'members-body', 'usage-body', 'usage-by-key-body', 'audit-body', 'tokens-chart', 'requests-chart', 'account-switcher', 'account-name', 'who', 'secret-title', 'confirm-title', 'confirm-text', 'edit-title']) {
      $(id).replaceChildren();
    }
    for (const id of ['stat-requests', 'stat-refused', 'stat-cost', 'stat-prompt', 'stat-completion', 'stat-total']) $(id).textContent = '0';
    $('stat-budget').textContent = 'none';
    for (const td of $('usage-total').querySelectorAll('td')) td.textContent = '';
    $('usage-key').replaceChildren(el('option', { text: 'All keys', attrs: { value: '' } }));
    for (const form of ['create-key-form', 'edit-key-form', 'invite-form']) $(form).reset();
    for (const error of ['create-key-error', 'edit-error', 'invite-error']) setError($(error), null);
    $('create-key-form').hidden = true;
    for (const dialog of [$('edit-dialog'), $('confirm-dialog')]) if (dialog.open) dialog.close();
  }

  function signedOut(message) {
    forget();
    showSignIn();
    if (message) banner(message, 'info');
  }

  /** What the signed-in person may do in the current account (the API decides; the page reflects it). */
  function can() {
    const session = state.session;
    const role = session && session.account ? session.account.role : null;
    const admin = Boolean(session && session.admin);
    return {
      role,
      admin,
      createKeys: admin || role === 'owner' || role === 'member',
      manageMembers: admin || role === 'owner',
      readAudit: admin || role === 'owner',
      manageKey: (key) => admin || role === 'owner' || (role === 'member' && key.createdBy === session.email),
    };
  }

  function applySession(session) {
    state.session = session;
    $('who').textContent = session.email;
    const account = session.account;
    const switcher = $('account-switcher');
    switcher.replaceChildren();
    for (const option of session.accounts || []) {
      const role = option.role || (session.admin ? 'admin' : '');
      switcher.append(el('option', { text: role ? `${option.name} (${role})` : option.name, attrs: { value: option.id } }));
    }
    const several = (session.accounts || []).length > 1;
    $('account-switch').hidden = !several;
    $('account-name').hidden = several || !account;
    if (account) {
      switcher.value = account.id;
      $('account-name').textContent = account.name;
      const role = account.role || (session.admin ? 'admin' : '');
      if (role) $('account-name').append(el('span', { className: `role-badge role-${role}`, text: role }));
    }
    if (!account) {
      showView('no-account-view');
      return;
    }
    const allowed = can();
    $('tab-audit').hidden = !allowed.readAudit;
    $('new-key-button').hidden = !allowed.createKeys;
    $('invite-form').hidden = !allowed.manageMembers;
    $('members-role-note').hidden = allowed.manageMembers;
    const note = $('keys-role-note');
    note.hidden = allowed.admin || allowed.role === 'owner';
    note.textContent = 'As a member you see all of the account’s keys, and edit, rotate or revoke the ones you created.';
    if (!allowed.readAudit && state.tab === 'audit') state.tab = 'keys';
    showView('app-view');
  }

  async function enterConsole(session) {
    forget();
    applySession(session);
    if (!session.account) return;
    // The keys are read whatever the tab: the other tabs name keys by them.
    if (state.tab !== 'keys') await loadKeys();
    selectTab(state.tab, false);
  }

  // ---------------------------------------------------------------------------------------------
  // Tabs

  const TABS = ['keys', 'members', 'usage', 'audit'];

  function selectTab(name, focus) {
    if (state.tab !== name) banner('');
    state.tab = name;
    for (const tab of TABS) {
      const button = $(`tab-${tab}`);
      const selected = tab === name;
      button.setAttribute('aria-selected', String(selected));
      button.tabIndex = selected ? 0 : -1;
      $(`panel-${tab}`).hidden = !selected;
      if (selected && focus) button.focus();
    }
    if (name === 'keys') loadKeys();
    if (name === 'members') loadMembers();
    if (name === 'usage') loadUsage();
    if (name === 'audit') loadAudit();
  }

  function visibleTabs() {
    return TABS.filter((tab) => !$(`tab-${tab}`).hidden);
  }

  function onTabKey(event) {
    const tabs = visibleTabs();
    const at = tabs.indexOf(state.tab);
    let next;
    if (event.key === 'ArrowRight') next = tabs[(at + 1) % tabs.length];
    else if (event.key === 'ArrowLeft') next = tabs[(at - 1 + tabs.length) % tabs.length];
    else if (event.key === 'Home') next = tabs[0];
    else if (event.key === 'End') next = tabs[tabs.length - 1];
    if (!next) return;
    event.preventDefault();
    selectTab(next, true);
  }

  // ---------------------------------------------------------------------------------------------
  // Keys

  function keyStatus(key) {
    if (key.revokedAt) return 'revoked';
    if (key.expiresAt && Date.parse(key.expiresAt) <= Date.now()) return 'expired';
    return 'active';
  }

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

  async function loadKeys() {
    const list = await busy(null, () => api('GET', '/keys'));
    if (!list) return;
    state.keys = list.data.slice().sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
    renderKeys();
    renderUsageKeyOptions();
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
        cell('Expires', key.expiresAt ? el('span', { text: `${formatDate(key.expiresAt, true)} (UTC)`, attrs: { title: key.expiresAt, 'data-testid': 'key-expires' } }) : el('span', { className: 'muted', text: 'never', attrs: { 'data-testid': 'key-expires' } })),
        cell('Status', el('span', { className: `status status-${status}`, text: status, attrs: { 'data-testid': 'key-status' } })),
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
        text: 'A new secret is made for this key, with the same settings. The current secret stops working at once: every program using it must be given the new one.',
        confirm: 'Rotate key',
      });
      if (!ok) return;
      await busy(button, async () => {
        const rotated = await api('POST', `/keys/${encodeURIComponent(key.id)}/rotate`);
        showSecret(rotated.key, `New secret for “${rotated.name}”`);
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
  function showSecret(secret, title) {
    $('secret-title').textContent = title;
    $('secret-value').textContent = secret;
    $('secret-copy-state').textContent = '';
    $('secret-panel').hidden = false;
    $('secret-panel').scrollIntoView({ block: 'nearest' });
    $('secret-copy').focus();
  }

  function hideSecret() {
    $('secret-value').textContent = '';
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
    if (input.validity && input.validity.badInput) throw new Error(`${label} must be a whole number (0 or more).`);
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
    if ((input.validity && input.validity.badInput) || (text !== '' && !(Number.isFinite(value) && value >= 0))) throw new Error(`${label} must be an amount (0 or more).`);
    return text === '' ? null : value;
  }

  function formatAmount(value) {
    return value.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: value > 0 && value < 1 ? 4 : 2 });
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
          if (value !== null) (body[group] = body[group] || {})[field] = value;
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
          if (value !== (before === undefined ? null : before)) (changes[group] = changes[group] || {})[field] = value;
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

  // ---------------------------------------------------------------------------------------------
  // Asking first: a dialog of the page's own

  let confirmResolve = null;

  function confirmDialog({ title, text, confirm }) {
    const dialog = $('confirm-dialog');
    if (confirmResolve) confirmResolve(false);
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = confirm;
    dialog.returnValue = '';
    return new Promise((resolve) => {
      confirmResolve = resolve;
      dialog.showModal();
      $('confirm-cancel').focus();
    });
  }

  function onConfirmClosed() {
    const resolve = confirmResolve;
    confirmResolve = null;
    if (resolve) resolve($('confirm-dialog').returnValue === 'confirm');
  }

  // ---------------------------------------------------------------------------------------------
  // Members

  async function loadMembers() {
    const list = await busy(null, () => api('GET', '/members'));
    if (!list) return;
    state.members = list.data;
    renderMembers();
  }

  function renderMembers() {
    const allowed = can();
    const body = $('members-body');
    body.replaceChildren();
    for (const member of state.members) {
      const me = state.session && member.email === state.session.email;
      const row = el('tr', { attrs: { 'data-testid': 'member-row', 'data-email': member.email } });
      const emailCell = el('span', { className: 'member-email', text: member.email });
      if (me) emailCell.append(el('span', { className: 'you', text: ' (you)' }));
      const actions = el('span', { className: 'row-actions' });
      if (allowed.manageMembers) {
        const remove = el('button', { className: 'small danger-outline', text: 'Remove', attrs: { type: 'button', 'data-testid': 'member-remove', 'aria-label': `Remove ${member.email}` } });
        remove.addEventListener('click', () => onRemoveMember(member, remove));
        actions.append(remove);
      }
      row.append(
        cell('Email', emailCell, 'cell-title'),
        cell('Role', el('span', { className: `role-badge role-${member.role}`, text: member.role })),
        cell('Added', el('span', { text: formatDate(member.addedAt), attrs: { title: member.addedAt } })),
        cell('Added by', member.addedBy || ''),
        cell('Actions', actions, 'cell-actions'),
      );
      body.append(row);
    }
  }

  async function onRemoveMember(member, button) {
    const me = state.session && member.email === state.session.email;
    const ok = await confirmDialog({
      title: me ? 'Leave this account?' : `Remove ${member.email}?`,
      text: me ? 'You will no longer see this account in the console.' : `${member.email} will no longer see this account in the console.`,
      confirm: me ? 'Leave account' : 'Remove',
    });
    if (!ok) return;
    await busy(button, async () => {
      await api('DELETE', `/members/${encodeURIComponent(member.email)}`);
      banner(`${member.email} is removed from the account.`, 'success');
      if (me) {
        const session = await api('GET', '/session');
        await enterConsole(session);
        return;
      }
      await loadMembers();
    });
  }

  async function onInvite(event) {
    event.preventDefault();
    const errorBox = $('invite-error');
    setError(errorBox, null);
    hideInvite();
    const email = $('invite-email').value.trim();
    const role = $('invite-role').value;
    if (!email) {
      setError(errorBox, 'Enter the person’s email.');
      return;
    }
    await busy($('invite-submit'), async () => {
      const added = await api('POST', '/members', { email, role });
      $('invite-form').reset();
      if (added.passwordLink) {
        $('invite-link-email').textContent = added.email;
        $('invite-link').textContent = new URL(added.passwordLink, location.origin).href;
        $('invite-copy-state').textContent = '';
        $('invite-panel').hidden = false;
        $('invite-copy').focus();
      } else if (added.invited === 'email') {
        // console.smtp: the link went to their mailbox; it is in no answer, so nobody else holds it.
        banner(`${added.email} is added as ${added.role}. An email with a link to set their password is on its way to them.`, 'success');
      } else if (added.invited === 'failed') {
        banner(`${added.email} is added as ${added.role}, but the invitation email could not be sent. A platform admin can make them a new link.`, 'error');
      } else {
        banner(`${added.email} is added as ${added.role}. They sign in as they already do.`, 'success');
      }
      await loadMembers();
    }, (error) => setError(errorBox, error));
  }

  function hideInvite() {
    $('invite-link').textContent = '';
    $('invite-link-email').textContent = '';
    $('invite-panel').hidden = true;
  }

  // ---------------------------------------------------------------------------------------------
  // Usage

  /** The last USAGE_DAYS days, today (UTC) included, oldest first. */
  function usageDays() {
    const today = Date.parse(`${utcDay(Date.now())}T00:00:00Z`);
    const days = [];
    for (let i = USAGE_DAYS - 1; i >= 0; i--) days.push(utcDay(today - i * DAY_MS));
    return days;
  }

  function renderUsageKeyOptions() {
    const select = $('usage-key');
    const chosen = select.value;
    select.replaceChildren(el('option', { text: 'All keys', attrs: { value: '' } }));
    for (const key of state.keys) {
      const status = keyStatus(key);
      select.append(el('option', { text: status === 'active' ? key.name : `${key.name} (${status})`, attrs: { value: key.id } }));
    }
    select.value = state.keys.some((key) => key.id === chosen) ? chosen : '';
  }

  async function loadUsage() {
    const days = usageDays();
    const from = days[0];
    const to = days[days.length - 1];
    const keyId = $('usage-key').value;
    const query = new URLSearchParams({ from, to });
    if (keyId) query.set('keyId', keyId);
    $('usage-csv').href = `${API}/usage.csv?${new URLSearchParams({ from, to })}`;
    $('usage-range').textContent = `${from} to ${to} (UTC)`;
    const usage = await busy($('usage-refresh'), () => api('GET', `/usage?${query}`));
    if (!usage) return;
    state.usage = { days, keyId, data: usage.data, currency: usage.currency, budget: usage.budget };
    renderUsage();
  }

  /** Spend against the budget (the chosen key's, else the account's), this UTC day and month. */
  function budgetText(budget, currency) {
    if (!budget || (budget.perDay === null && budget.perMonth === null)) return 'none';
    const parts = [];
    if (budget.perDay !== null) parts.push(`today ${formatAmount(budget.spentToday)} of ${formatAmount(budget.perDay)}`);
    if (budget.perMonth !== null) parts.push(`month ${formatAmount(budget.spentThisMonth)} of ${formatAmount(budget.perMonth)}`);
    return `${parts.join(' · ')} ${currency || ''}`.trim();
  }

  function renderUsage() {
    const usage = state.usage;
    if (!usage) return;
    const byDay = new Map(usage.days.map((date) => [date, { date, requests: 0, promptTokens: 0, completionTokens: 0 }]));
    const byKey = new Map();
    for (const row of usage.data) {
      const day = byDay.get(row.date);
      if (day) {
        day.requests += row.requests;
        day.promptTokens += row.promptTokens;
        day.completionTokens += row.completionTokens;
      }
      const key = byKey.get(row.keyId) || { keyId: row.keyId, requests: 0, promptTokens: 0, completionTokens: 0 };
      key.requests += row.requests;
      key.promptTokens += row.promptTokens;
      key.completionTokens += row.completionTokens;
      byKey.set(row.keyId, key);
    }
    const days = [...byDay.values()];
    const total = days.reduce((sum, d) => ({ requests: sum.requests + d.requests, promptTokens: sum.promptTokens + d.promptTokens, completionTokens: sum.completionTokens + d.completionTokens }), { requests: 0, promptTokens: 0, completionTokens: 0 });

    $('stat-requests').textContent = formatNumber(total.requests);
    $('stat-refused').textContent = formatNumber(usage.data.reduce((sum, row) => sum + (row.refused || 0), 0));
    const cost = usage.data.reduce((sum, row) => sum + (row.cost || 0), 0);
    $('stat-cost').textContent = `${cost.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: cost > 0 && cost < 1 ? 4 : 2 })} ${usage.currency || ''}`.trim();
    $('stat-budget').textContent = budgetText(usage.budget, usage.currency);
    $('stat-prompt').textContent = formatNumber(total.promptTokens);
    $('stat-completion').textContent = formatNumber(total.completionTokens);
    $('stat-total').textContent = formatNumber(total.promptTokens + total.completionTokens);

    barChart($('tokens-chart'), days, [
      { field: 'promptTokens', className: 'bar-prompt', label: 'prompt tokens' },
      { field: 'completionTokens', className: 'bar-completion', label: 'completion tokens' },
    ], 'Tokens per day');
    barChart($('requests-chart'), days, [{ field: 'requests', className: 'bar-requests', label: 'requests' }], 'Requests per day');

    // Per day, newest first; days without usage are there, as zero.
    const body = $('usage-body');
    body.replaceChildren();
    for (const day of days.slice().reverse()) {
      const row = el('tr', { className: day.requests === 0 ? 'zero' : '', attrs: { 'data-testid': 'usage-row', 'data-date': day.date } });
      row.append(
        el('th', { text: day.date, attrs: { scope: 'row' } }),
        el('td', { className: 'num', text: formatNumber(day.requests) }),
        el('td', { className: 'num', text: formatNumber(day.promptTokens) }),
        el('td', { className: 'num', text: formatNumber(day.completionTokens) }),
        el('td', { className: 'num', text: formatNumber(day.promptTokens + day.completionTokens) }),
      );
      body.append(row);
    }
    const foot = $('usage-total').querySelectorAll('td');
    foot[0].textContent = formatNumber(total.requests);
    foot[1].textContent = formatNumber(total.promptTokens);
    foot[2].textContent = formatNumber(total.completionTokens);
    foot[3].textContent = formatNumber(total.promptTokens + total.completionTokens);

    // Per key over the period.
    const names = new Map(state.keys.map((key) => [key.id, key.name]));
    const keyBody = $('usage-by-key-body');
    keyBody.replaceChildren();
    const keys = [...byKey.values()].sort((a, b) => b.promptTokens + b.completionTokens - (a.promptTokens + a.completionTokens));
    if (keys.length === 0) keyBody.append(el('tr', {}, el('td', { className: 'muted', text: 'No usage in this period.', attrs: { colspan: 5 } })));
    for (const key of keys) {
      const name = names.get(key.keyId);
      keyBody.append(el('tr', { attrs: { 'data-testid': 'usage-key-row', 'data-key-id': key.keyId } },
        el('th', { attrs: { scope: 'row' } }, el('span', { text: name || key.keyId }), name ? el('span', { className: 'sub', text: key.keyId }) : null),
        el('td', { className: 'num', text: formatNumber(key.requests) }),
        el('td', { className: 'num', text: formatNumber(key.promptTokens) }),
        el('td', { className: 'num', text: formatNumber(key.completionTokens) }),
        el('td', { className: 'num', text: formatNumber(key.promptTokens + key.completionTokens) }),
      ));
    }
  }

  let resizeFrame = 0;
  function onResize() {
    cancelAnimationFrame(resizeFrame);
    resizeFrame = requestAnimationFrame(() => {
      if (state.usage && !$('panel-usage').hidden) renderUsage();
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Audit

  async function loadAudit() {
    const body = $('audit-body');
    const list = await busy($('audit-refresh'), () => api('GET', '/audit'));
    if (!list) return;
    const names = new Map(state.keys.map((key) => [key.id, key.name]));
    body.replaceChildren();
    for (const event of list.data) {
      const name = names.get(event.target);
      const target = el('span', { className: 'audit-target' }, el('span', { text: name || event.target || '' }), name ? el('span', { className: 'sub', text: event.target }) : null);
      const details = el('span', { className: 'details', attrs: { 'data-testid': 'audit-details' } });
      for (const [name, value] of Object.entries(event.details || {})) {
        const text = Array.isArray(value) ? value.join(', ') : value !== null && typeof value === 'object' ? JSON.stringify(value) : String(value);
        details.append(el('span', { className: 'breakable' }, `${name}: `, el('code', { text })));
      }
      body.append(el('tr', { attrs: { 'data-testid': 'audit-row', 'data-action': event.action } },
        cell('When', el('span', { attrs: { title: event.at } }, el('span', { className: 'nowrap', text: formatDate(event.at) }), ' ', el('span', { className: 'sub nowrap', text: formatTime(event.at) })), 'cell-title'),
        cell('Who', el('span', { className: 'breakable', text: event.actor || '' })),
        cell('Action', el('code', { className: 'action', text: event.action, attrs: { 'data-testid': 'audit-action' } })),
        cell('Target', target),
        cell('From', el('span', { className: 'breakable nowrap', text: event.client || '' })),
        cell('Details', details),
      ));
    }
    $('audit-empty').hidden = list.data.length > 0;
  }

  // ---------------------------------------------------------------------------------------------
  // Wiring

  async function onSignIn(event) {
    event.preventDefault();
    const errorBox = $('signin-error');
    setError(errorBox, null);
    banner('');
    const email = $('signin-email').value.trim();
    const password = $('signin-password').value;
    if (!email || !password) {
      setError(errorBox, 'Enter your email and your password.');
      return;
    }
    await busy($('signin-submit'), async () => {
      const session = await api('POST', '/session', { email, password });
      $('signin-form').reset();
      state.tab = 'keys';
      await enterConsole(session);
    }, (error) => {
      $('signin-password').value = '';
      setError(errorBox, error);
      $('signin-password').focus();
    });
  }

  async function onSetPassword(event) {
    event.preventDefault();
    const errorBox = $('set-password-error');
    setError(errorBox, null);
    const token = passwordToken();
    const password = $('new-password').value;
    if (!token) {
      setError(errorBox, 'This page was not opened from a password link. Ask for a new link.');
      return;
    }
    if (password.length < MIN_PASSWORD_LENGTH) {
      setError(errorBox, `The password must be at least ${MIN_PASSWORD_LENGTH} characters.`);
      return;
    }
    if (password !== $('new-password-again').value) {
      setError(errorBox, 'The two passwords are not the same.');
      return;
    }
    await busy($('set-password-submit'), async () => {
      const result = await api('POST', '/password', { token, password });
      clearHash();
      forget();
      showSignIn(result.email);
      banner('Your password is set. Sign in with it.', 'success');
    }, (error) => setError(errorBox, error));
  }

  async function onSignOut() {
    await busy($('sign-out'), async () => {
      try {
        await api('DELETE', '/session');
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 401)) throw error;
      }
      state.tab = 'keys';
      signedOut('You are signed out.');
    });
  }

  /** Ends every session of the person (other devices too), then this page's. */
  async function onSignOutEverywhere() {
    await busy($('sign-out-everywhere'), async () => {
      try {
        await api('DELETE', '/sessions');
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 401)) throw error;
      }
      state.tab = 'keys';
      signedOut('You are signed out everywhere: every session of yours has ended.');
    });
  }

  async function onSwitchAccount() {
    const account = $('account-switcher').value;
    if (!state.session || !state.session.account || account === state.session.account.id) return;
    await busy($('account-switcher'), async () => {
      const session = await api('PUT', '/session/account', { account });
      banner('');
      await enterConsole(session);
    }, (error) => {
      $('account-switcher').value = state.session.account.id;
      banner(error.message, 'error');
    });
  }

  async function loadConfig() {
    try {
      const config = await api('GET', '/config');
      $('oidc').hidden = !(config && config.oidc);
    } catch {
      $('oidc').hidden = true;
    }
  }

  async function start() {
    loadConfig();
    if (passwordToken()) {
      showSetPassword();
      return;
    }
    if (location.hash.startsWith(SIGN_IN_ERROR)) {
      const code = decodeURIComponent(location.hash.slice(SIGN_IN_ERROR.length));
      clearHash();
      showSignIn();
      setError($('signin-error'), Object.hasOwn(SIGN_IN_ERRORS, code) ? SIGN_IN_ERRORS[code] : 'The sign-in did not succeed. Try again.');
      return;
    }
    try {
      const session = await api('GET', '/session');
      await enterConsole(session);
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) showSignIn();
      else {
        showSignIn();
        banner(error.message, 'error');
      }
    }
  }

  function wire() {
    // A form's error goes once the person changes what they typed.
    for (const [form, error] of [['signin-form', 'signin-error'], ['set-password-form', 'set-password-error'], ['create-key-form', 'create-key-error'], ['edit-key-form', 'edit-error'], ['invite-form', 'invite-error']]) {
      $(form).addEventListener('input', () => setError($(error), null));
    }
    $('signin-form').addEventListener('submit', onSignIn);
    $('set-password-form').addEventListener('submit', onSetPassword);
    $('sign-out').addEventListener('click', onSignOut);
    $('sign-out-everywhere').addEventListener('click', onSignOutEverywhere);
    $('account-switcher').addEventListener('change', onSwitchAccount);
    for (const tab of TABS) $(`tab-${tab}`).addEventListener('click', () => selectTab(tab, false));
    document.querySelector('.tabs').addEventListener('keydown', onTabKey);

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
    $('confirm-dialog').addEventListener('close', onConfirmClosed);

    $('invite-form').addEventListener('submit', onInvite);
    $('invite-copy').addEventListener('click', () => copyText($('invite-link').textContent, $('invite-link'), $('invite-copy-state')));
    $('invite-done').addEventListener('click', hideInvite);

    $('usage-key').addEventListener('change', loadUsage);
    $('usage-refresh').addEventListener('click', loadUsage);
    $('audit-refresh').addEventListener('click', loadAudit);
    window.addEventListener('resize', onResize);

    // A password link pasted into a console already open.
    window.addEventListener('hashchange', () => {
      if (passwordToken()) showSetPassword();
    });
  }

  wire();
  start();
})();
