// @ts-check
/*
 * Who is signed in: the sign-in form (and the identity provider's button), setting a password from a
 * one-time link, signing out (here or everywhere), switching accounts, and what the session shows.
 */
import { $, el, setError, banner } from './console-dom.js';
import { state, page, api, busy, can, ApiError } from './console-state.js';
import { showWebhook } from './console-members.js';

/** @typedef {import('./console-types.js').Session} Session */
/** @param {string} id */
const input = (id) => $(id, HTMLInputElement);
/** @param {string} id */
const button = (id) => $(id, HTMLButtonElement);
/** @param {string} id */
const form = (id) => $(id, HTMLFormElement);

const SET_PASSWORD = '#set-password=';
/** Where the identity provider's sign-in sends a browser it refused, with the error code. */
const SIGN_IN_ERROR = '#sign-in-error=';
/** @type {Record<string, string>} */
const SIGN_IN_ERRORS = {
  oidc_sign_in_expired: 'That sign-in had expired or was already used. Sign in again.',
  oidc_sign_in_failed: 'The identity provider did not sign you in. Try again, or ask your administrator.',
  permission_denied: 'Your identity provider account is not given an account here. Ask an account owner to add you.',
  identity_provider_unavailable: 'The identity provider cannot be reached just now. Try again in a moment.',
  too_many_sign_ins: 'Too many sign-ins were started from here. Wait a minute and try again.',
};
const MIN_PASSWORD_LENGTH = 12;

const VIEWS = ['loading', 'signin-view', 'set-password-view', 'no-account-view', 'app-view'];

/** @param {string} id */
export function showView(id) {
  for (const view of VIEWS) $(view).hidden = view !== id;
  $('session-bar').hidden = !state.session;
}

/** @param {string} [email] */
export function showSignIn(email) {
  showView('signin-view');
  form('signin-form').reset();
  setError($('signin-error'), null);
  if (email) input('signin-email').value = email;
  (email ? $('signin-password') : $('signin-email')).focus();
}

function showSetPassword() {
  showView('set-password-view');
  form('set-password-form').reset();
  setError($('set-password-error'), null);
  $('new-password').focus();
  const token = passwordToken();
  if (token) checkLink(token);
}

/**
 * Says at once when the link is used, void or made up, rather than after the password is typed
 * twice. The server only looks (the link stays usable); any other trouble is left for the form to
 * report, as setting the password would meet it too.
 */
/** @param {string} token */
async function checkLink(token) {
  try {
    await api('POST', '/password/check', { token });
  } catch (error) {
    if (error instanceof ApiError && error.code === 'invalid_link' && passwordToken() === token) setError($('set-password-error'), error);
  }
}

const passwordToken = () => (location.hash.startsWith(SET_PASSWORD) ? decodeURIComponent(location.hash.slice(SET_PASSWORD.length)) : null);

function clearHash() {
  history.replaceState(null, '', location.pathname + location.search);
}

/** @param {Session} session */
export function applySession(session) {
  state.session = session;
  $('who').textContent = session.email;
  const account = session.account;
  const switcher = $('account-switcher', HTMLSelectElement);
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
  $('policy-form').hidden = !allowed.setPolicy;
  input('policy-days').value = account.keyPolicy ? String(account.keyPolicy.maxLifetimeDays) : '';
  $('webhook-form').hidden = !allowed.setPolicy;
  showWebhook(account.alertWebhook);
  $('members-role-note').hidden = allowed.manageMembers;
  const note = $('keys-role-note');
  note.hidden = allowed.manageKeys !== 'own';
  note.textContent = 'As a member you see all of the account’s keys, and edit, rotate or revoke the ones you created.';
  if (!allowed.readAudit && state.tab === 'audit') state.tab = 'keys';
  showView('app-view');
}

/** @param {SubmitEvent} event */
async function onSignIn(event) {
  event.preventDefault();
  const errorBox = $('signin-error');
  setError(errorBox, null);
  banner('');
  const email = input('signin-email').value.trim();
  const password = input('signin-password').value;
  if (!email || !password) {
    setError(errorBox, 'Enter your email and your password.');
    return;
  }
  await busy(button('signin-submit'), async () => {
    /** @type {Session} */
    const session = await api('POST', '/session', { email, password });
    form('signin-form').reset();
    state.tab = 'keys';
    await page.enter(session);
  }, (error) => {
    input('signin-password').value = '';
    setError(errorBox, error);
    $('signin-password').focus();
  });
}

/** @param {SubmitEvent} event */
async function onSetPassword(event) {
  event.preventDefault();
  const errorBox = $('set-password-error');
  setError(errorBox, null);
  const token = passwordToken();
  const password = input('new-password').value;
  if (!token) {
    setError(errorBox, 'This page was not opened from a password link. Ask for a new link.');
    return;
  }
  if (password.length < MIN_PASSWORD_LENGTH) {
    setError(errorBox, `The password must be at least ${MIN_PASSWORD_LENGTH} characters.`);
    return;
  }
  if (password !== input('new-password-again').value) {
    setError(errorBox, 'The two passwords are not the same.');
    return;
  }
  await busy(button('set-password-submit'), async () => {
    const result = await api('POST', '/password', { token, password });
    clearHash();
    page.forget();
    showSignIn(result.email);
    banner('Your password is set. Sign in with it.', 'success');
  }, (error) => setError(errorBox, error));
}

async function onSignOut() {
  await busy(button('sign-out'), async () => {
    try {
      await api('DELETE', '/session');
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) throw error;
    }
    state.tab = 'keys';
    page.signedOut('You are signed out.');
  });
}

/** Ends every session of the person (other devices too), then this page's. */
async function onSignOutEverywhere() {
  await busy(button('sign-out-everywhere'), async () => {
    try {
      await api('DELETE', '/sessions');
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) throw error;
    }
    state.tab = 'keys';
    page.signedOut('You are signed out everywhere: every session of yours has ended.');
  });
}

async function onSwitchAccount() {
  const switcher = $('account-switcher', HTMLSelectElement);
  const account = switcher.value;
  const current = state.session?.account;
  if (!current || account === current.id) return;
  await busy(switcher, async () => {
    /** @type {Session} */
    const session = await api('PUT', '/session/account', { account });
    banner('');
    await page.enter(session);
  }, (error) => {
    switcher.value = current.id;
    banner(error.message, 'error');
  });
}

async function loadConfig() {
  try {
    const config = await api('GET', '/config');
    $('oidc').hidden = !(config?.oidc);
    if (config?.usageFlushSeconds) $('usage-lag-seconds').textContent = String(config.usageFlushSeconds);
  } catch {
    $('oidc').hidden = true;
  }
}

/** The page as it opens: a password link, a refused sign-in, a session still open, or signing in. */
export async function startSession() {
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
    /** @type {Session} */
    const session = await api('GET', '/session');
    await page.enter(session);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) showSignIn();
    else {
      showSignIn();
      banner(error instanceof Error ? error.message : String(error), 'error');
    }
  }
}

export function wireSession() {
  $('signin-form').addEventListener('submit', onSignIn);
  $('set-password-form').addEventListener('submit', onSetPassword);
  $('sign-out').addEventListener('click', onSignOut);
  $('sign-out-everywhere').addEventListener('click', onSignOutEverywhere);
  $('account-switcher').addEventListener('change', onSwitchAccount);
  // A password link pasted into a console already open.
  window.addEventListener('hashchange', () => {
    if (passwordToken()) showSetPassword();
  });
}
