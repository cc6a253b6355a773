// @ts-check
/*
 * The console's Members tab: who is in the account with which role, adding people (a password link
 * shown once, or sent by mail), changing their role, and removing them (or leaving); and, for owners, the key lifetime policy
 * and the account's own alert webhook (a secret: once saved, only its host is shown).
 */
import { $, el, cell, setError, banner, copyText, confirmDialog } from './console-dom.js';
import { formatDate, ROLES } from './console-format.js';
import { state, page, api, busy, can } from './console-state.js';

/** @typedef {import('./console-types.js').Member} Member */
/** @typedef {import('./console-types.js').Session} Session */

export async function loadMembers() {
  /** @type {import('./console-types.js').List<Member> | undefined} */
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
      cell('Role', allowed.manageMembers ? roleSelect(member) : el('span', { className: `role-badge role-${member.role}`, text: member.role })),
      cell('Added', el('span', { text: formatDate(member.addedAt), attrs: { title: member.addedAt } })),
      cell('Added by', member.addedBy || ''),
      cell('Actions', actions, 'cell-actions'),
    );
    body.append(row);
  }
}

/** An owner's control of a member's role: changed as soon as another is picked. @param {Member} member */
function roleSelect(member) {
  const select = el('select', { className: 'role-select', attrs: { 'data-testid': 'member-role', 'aria-label': `Role of ${member.email}` } },
    ...ROLES.map((role) => el('option', { text: role, attrs: { value: role, selected: role === member.role } })));
  select.value = member.role;
  select.addEventListener('change', () => onRoleChange(member, select));
  return select;
}

/** @param {Member} member @param {HTMLSelectElement} select */
async function onRoleChange(member, select) {
  const role = select.value;
  const me = state.session && member.email === state.session.email;
  const done = await busy(select, async () => {
    /** @type {Member} */
    const changed = await api('PATCH', `/members/${encodeURIComponent(member.email)}`, { role });
    banner(`${changed.email} is now ${changed.role === 'owner' ? 'an owner' : 'a member'} of the account.`, 'success');
    // One's own role decides what the page shows: the session says it again.
    if (me) await page.enter(/** @type {Session} */ (await api('GET', '/session')));
    else await loadMembers();
    return true;
  });
  if (!done) select.value = member.role; // refused (the last owner, a role taken away meanwhile): as it was
}

/** @param {Member} member @param {HTMLButtonElement} button */
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
      /** @type {Session} */
      const session = await api('GET', '/session');
      await page.enter(session);
      return;
    }
    await loadMembers();
  });
}

/** @param {SubmitEvent} event */
async function onInvite(event) {
  event.preventDefault();
  const errorBox = $('invite-error');
  setError(errorBox, null);
  hideInvite();
  const email = $('invite-email', HTMLInputElement).value.trim();
  const role = $('invite-role', HTMLSelectElement).value;
  if (!email) {
    setError(errorBox, 'Enter the person’s email.');
    return;
  }
  await busy($('invite-submit', HTMLButtonElement), async () => {
    /** @type {Member & { passwordLink?: string, invited?: 'email' | 'failed' }} */
    const added = await api('POST', '/members', { email, role });
    $('invite-form', HTMLFormElement).reset();
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

export function hideInvite() {
  $('invite-link').textContent = '';
  $('invite-link-email').textContent = '';
  $('invite-panel').hidden = true;
}

/** The account's key policy (its owners'): the longest its keys may live, or none. @param {SubmitEvent} event */
async function onPolicy(event) {
  event.preventDefault();
  const errorBox = $('policy-error');
  setError(errorBox, null);
  const text = $('policy-days', HTMLInputElement).value.trim();
  const days = Number(text);
  if (text !== '' && !(Number.isInteger(days) && days >= 1 && days <= 3650)) {
    setError(errorBox, 'Enter a whole number of days from 1 to 3650, or leave it empty for no limit.');
    return;
  }
  await busy($('policy-submit', HTMLButtonElement), async () => {
    const saved = await api('PATCH', '/account', { keyPolicy: text === '' ? null : { maxLifetimeDays: days } });
    if (state.session?.account) state.session.account.keyPolicy = saved.keyPolicy;
    banner(saved.keyPolicy ? `Keys of ${saved.name} now live at most ${saved.keyPolicy.maxLifetimeDays} days.` : `Keys of ${saved.name} may now live for ever.`, 'success');
  }, (error) => setError(errorBox, error));
}

/** Where the account's alerts go: its own webhook's host, or the platform's. @param {string | null} host */
export function showWebhook(host) {
  $('webhook-hint').textContent = host
    ? `Alerts of this account go to ${host}. The URL is a secret: only its host is shown. A new URL replaces it.`
    : "Alerts of this account go to the platform's webhook, if it has one. Give an https URL (a Slack or Teams incoming webhook) to have them here.";
  $('webhook-clear').hidden = !host;
}

/** Sets the account's own alert webhook, or (null) goes back to the platform's. @param {string | null} url @param {HTMLButtonElement} button */
async function saveWebhook(url, button) {
  const errorBox = $('webhook-error');
  setError(errorBox, null);
  await busy(button, async () => {
    const saved = await api('PATCH', '/account', { alertWebhookUrl: url });
    if (state.session?.account) state.session.account.alertWebhook = saved.alertWebhook;
    $('webhook-url', HTMLInputElement).value = '';
    showWebhook(saved.alertWebhook);
    banner(saved.alertWebhook ? `Alerts of ${saved.name} now go to ${saved.alertWebhook}.` : `Alerts of ${saved.name} now go to the platform's webhook.`, 'success');
  }, (error) => setError(errorBox, error));
}

export function wireMembers() {
  $('invite-form').addEventListener('submit', onInvite);
  $('policy-form').addEventListener('submit', onPolicy);
  $('webhook-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const url = $('webhook-url', HTMLInputElement).value.trim();
    if (!url.startsWith('https://')) return setError($('webhook-error'), 'Enter an https:// URL (it carries a secret: never plain http).');
    return saveWebhook(url, $('webhook-submit', HTMLButtonElement));
  });
  $('webhook-clear').addEventListener('click', () => saveWebhook(null, $('webhook-clear', HTMLButtonElement)));
  $('invite-copy').addEventListener('click', () => copyText($('invite-link').textContent || '', $('invite-link'), $('invite-copy-state')));
  $('invite-done').addEventListener('click', hideInvite);
}
