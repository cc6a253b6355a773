// @ts-check
/*
 * The account console: plain browser JavaScript in ES modules, no build step, no framework. This one
 * puts the page together: its parts (console-session.js, -keys, -members, -usage, -audit) on the
 * helpers of console-dom.js and the state and API calls of console-state.js.
 *
 * It runs under a strict Content-Security-Policy: no inline script or style, no eval (console-dom.js
 * says how elements are made). The session is an HttpOnly cookie the API sets: this page never sees it.
 */
import { $, el, setError, banner, wireConfirmDialog } from './console-dom.js';
import { state, page } from './console-state.js';
import { showSignIn, applySession, startSession, wireSession } from './console-session.js';
import { loadKeys, hideSecret, wireKeys } from './console-keys.js';
import { forgetKeyForm } from './console-key-form.js';
import { loadMembers, hideInvite, wireMembers } from './console-members.js';
import { loadUsage, wireUsage } from './console-usage.js';
import { loadAudit, wireAudit } from './console-audit.js';
import { hideAlerts } from './console-alerts.js';

/** @typedef {import('./console-types.js').Session} Session */

/** Everything shown of the signed-in person's account is removed. */
function forget() {
  state.session = null;
  state.keys = [];
  state.members = [];
  state.usage = null;
  hideSecret();
  hideInvite();
  hideAlerts();
  for (const id of ['keys-body', 'members-body', 'usage-body', 'usage-by-key-body', 'audit-body', 'tokens-chart', 'requests-chart', 'account-switcher', 'account-name', 'who', 'secret-title', 'confirm-title', 'confirm-text']) {
    $(id).replaceChildren();
  }
  for (const id of ['stat-requests', 'stat-refused', 'stat-cost', 'stat-prompt', 'stat-completion', 'stat-total']) $(id).textContent = '0';
  $('stat-budget').textContent = 'none';
  for (const td of $('usage-total').querySelectorAll('td')) td.textContent = '';
  $('usage-key').replaceChildren(el('option', { text: 'All keys', attrs: { value: '' } }));
  forgetKeyForm();
  $('invite-form', HTMLFormElement).reset();
  setError($('invite-error'), null);
  const confirm = $('confirm-dialog', HTMLDialogElement);
  if (confirm.open) confirm.close();
}

/** @param {string} [message] */
function signedOut(message) {
  forget();
  showSignIn();
  if (message) banner(message, 'info');
}

/** @param {Session} session */
async function enterConsole(session) {
  forget();
  applySession(session);
  if (!session.account) return;
  // The keys are read whatever the tab: the other tabs (and the alerts, read with them) name keys by them.
  if (state.tab !== 'keys') await loadKeys();
  selectTab(state.tab, false);
}

// ---------------------------------------------------------------------------------------------
// Tabs

const TABS = ['keys', 'members', 'usage', 'audit'];

/** @param {string} name @param {boolean} focus */
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

/** @param {KeyboardEvent} event */
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


function wire() {
  // A form's error goes once the person changes what they typed.
  for (const [form, error] of /** @type {const} */ ([['signin-form', 'signin-error'], ['set-password-form', 'set-password-error'], ['invite-form', 'invite-error']])) {
    $(form).addEventListener('input', () => setError($(error), null));
  }
  for (const tab of TABS) $(`tab-${tab}`).addEventListener('click', () => selectTab(tab, false));
  document.querySelector('.tabs')?.addEventListener('keydown', (event) => onTabKey(/** @type {KeyboardEvent} */ (event)));
  wireSession();
  wireKeys();
  wireConfirmDialog();
  wireMembers();
  wireUsage();
  wireAudit();
}

page.enter = enterConsole;
page.forget = forget;
page.signedOut = signedOut;
wire();
startSession();
