// @ts-check
/*
 * The Usage tab's breakdowns: a calendar month's usage (this one to date, or the last) by model and by
 * end user, the largest first, as budgets and invoices count it; an end user looked up by the id the
 * application sends (the server makes its digest: only digests are kept); the end users as CSV.
 */
import { $, el, setError } from './console-dom.js';
import { formatNumber, formatAmount, groupLabel, monthRange } from './console-format.js';
import { API, api, busy, state } from './console-state.js';

/** @typedef {import('./console-types.js').Share} Share */
/** @typedef {'model' | 'endUser'} By */

/** End users shown in the table; the CSV has up to the API's most. */
const SHOWN = 20;

/** @param {Share} share @param {By} by @param {string} testid */
function shareRow(share, by, testid) {
  const group = share[by] ?? '';
  return el('tr', { attrs: { 'data-testid': testid, [`data-${by === 'model' ? 'model' : 'end-user'}`]: group } },
    el('th', { attrs: { scope: 'row' }, className: group === '' || group === '*' ? 'muted' : 'breakable', text: groupLabel(group, by) }),
    el('td', { className: 'num', text: formatNumber(share.requests) }),
    el('td', { className: 'num', attrs: { 'data-testid': 'refused' }, text: formatNumber(share.refused) }),
    el('td', { className: 'num', text: formatNumber(share.promptTokens + share.completionTokens) }),
    el('td', { className: 'num', text: formatAmount(share.cost) }),
  );
}

/** @param {HTMLElement} body @param {Share[]} shares @param {By} by @param {string} testid */
function fill(body, shares, by, testid) {
  body.replaceChildren();
  if (shares.length === 0) body.append(el('tr', {}, el('td', { className: 'muted', text: 'No usage in this period.', attrs: { colspan: 5 } })));
  for (const share of shares) body.append(shareRow(share, by, testid));
}

/** The chosen month's breakdowns (of one key when `keyId` is set). */
/** @param {string} keyId */
export async function loadBreakdowns(keyId) {
  const { from, to } = monthRange($('breakdown-month', HTMLSelectElement).value);
  $('breakdown-range').textContent = `${from} to ${to} (UTC)`;
  /** @param {By} by @param {number} limit */
  const query = (by, limit) => {
    const params = new URLSearchParams({ by, from, to, limit: String(limit) });
    if (keyId) params.set('keyId', keyId);
    return params;
  };
  $('usage-end-users-csv', HTMLAnchorElement).href = `${API}/usage/breakdown.csv?${query('endUser', 1000)}`;
  const [models, users] = await Promise.all([api('GET', `/usage/breakdown?${query('model', 100)}`), api('GET', `/usage/breakdown?${query('endUser', SHOWN)}`)]);
  fill($('usage-by-model-body'), models.data, 'model', 'usage-model-row');
  fill($('usage-by-end-user-body'), users.data, 'endUser', 'usage-end-user-row');
}

/**
 * An end user's digest as the gateway makes it (accounts/end-users.ts): `eu_` and 22 base64url
 * characters of SHA-256 over the account's id, a NUL and the id. Made here, so that the id the person
 * typed never leaves the page (a proxy in front of the gateway may log query strings).
 */
/** @param {string} accountId @param {string} id */
async function endUserDigest(accountId, id) {
  const bytes = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`${accountId}\u0000${id}`)));
  const base64 = btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  return `eu_${base64.slice(0, 22)}`;
}

/** @param {SubmitEvent} event */
async function findEndUser(event) {
  event.preventDefault();
  const id = $('end-user-id', HTMLInputElement).value.trim();
  const result = $('end-user-result');
  setError($('end-user-error'), null);
  result.replaceChildren();
  if (!id || !state.session?.account) return;
  const { from, to } = monthRange($('breakdown-month', HTMLSelectElement).value);
  const params = new URLSearchParams({ by: 'model', endUser: await endUserDigest(state.session.account.id, id), from, to });
  /** @type {import('./console-types.js').List<Share> | undefined} */
  const found = await busy($('end-user-submit', HTMLButtonElement), () => api('GET', `/usage/breakdown?${params}`), (error) => setError($('end-user-error'), error));
  if (!found) return;
  if (found.data.length === 0) {
    result.append(el('p', { className: 'muted', attrs: { 'data-testid': 'end-user-none' }, text: 'No usage of that end user in this period.' }));
    return;
  }
  const table = el('table', { className: 'data', attrs: { 'data-testid': 'end-user-models' } },
    el('thead', {}, el('tr', {}, ...['Model', 'Requests', 'Refused', 'Tokens', 'Cost'].map((name, i) => el('th', { attrs: { scope: 'col' }, className: i ? 'num' : '', text: name })))));
  const body = el('tbody');
  fill(body, found.data, 'model', 'end-user-model-row');
  table.append(body);
  result.append(el('div', { className: 'table-wrap scroll' }, table));
}

export function wireBreakdowns() {
  $('end-user-form').addEventListener('submit', findEndUser);
  $('breakdown-month').addEventListener('change', () => busy(null, () => loadBreakdowns($('usage-key', HTMLSelectElement).value)));
}
