// @ts-check
/*
 * The console's Usage tab: the last 30 UTC days of the account (or of one key), as totals, spend
 * against the budget, two bar charts, a table per day (a run of idle days in one row) and one per
 * key, each scrolling sideways in its own box when too wide, and a CSV download; the
 * breakdowns by model and end user are console-breakdown.js's.
 */
import { $, el, barChart } from './console-dom.js';
import { formatNumber, formatAmount, keyStatus, lastDays, sumUsage, foldIdleDays, budgetText, workloadName } from './console-format.js';
import { API, state, api, busy } from './console-state.js';
import { loadAlerts } from './console-alerts.js';
import { loadBreakdowns, wireBreakdowns } from './console-breakdown.js';

/** @typedef {import('./console-types.js').UsageDay} UsageDay */

const USAGE_DAYS = 30;

export function renderUsageKeyOptions() {
  const select = $('usage-key', HTMLSelectElement);
  const chosen = select.value;
  select.replaceChildren(el('option', { text: 'All keys', attrs: { value: '' } }));
  for (const key of state.keys) {
    const status = keyStatus(key);
    select.append(el('option', { text: status === 'active' ? key.name : `${key.name} (${status})`, attrs: { value: key.id } }));
  }
  select.value = state.keys.some((key) => key.id === chosen) ? chosen : '';
}

export async function loadUsage() {
  const days = lastDays(USAGE_DAYS);
  const from = /** @type {string} */ (days[0]);
  const to = /** @type {string} */ (days[days.length - 1]);
  const keyId = $('usage-key', HTMLSelectElement).value;
  const query = new URLSearchParams({ from, to });
  if (keyId) query.set('keyId', keyId);
  $('usage-csv', HTMLAnchorElement).href = `${API}/usage.csv?${new URLSearchParams({ from, to })}`;
  $('usage-range').textContent = `${from} to ${to} (UTC)`;
  /** @type {{ data: import('./console-types.js').UsageRow[], currency?: string, budget?: import('./console-types.js').BudgetSpend | null } | undefined} */
  const usage = await busy($('usage-refresh', HTMLButtonElement), () => api('GET', `/usage?${query}`));
  if (!usage) return;
  state.usage = { days, keyId, data: usage.data, currency: usage.currency, budget: usage.budget };
  renderUsage();
  loadAlerts();
  await busy(null, () => loadBreakdowns(keyId));
}

function renderUsage() {
  const usage = state.usage;
  if (!usage) return;
  const { perDay: days, perKey: keys, total, refused, cost } = sumUsage(usage.days, usage.data);

  $('stat-requests').textContent = formatNumber(total.requests);
  $('stat-refused').textContent = formatNumber(refused);
  $('stat-cost').textContent = `${formatAmount(cost)} ${usage.currency || ''}`.trim();
  $('stat-budget').textContent = budgetText(usage.budget, usage.currency);
  $('stat-prompt').textContent = formatNumber(total.promptTokens);
  $('stat-completion').textContent = formatNumber(total.completionTokens);
  $('stat-total').textContent = formatNumber(total.promptTokens + total.completionTokens);

  barChart($('tokens-chart'), days, [
    { field: 'promptTokens', className: 'bar-prompt', label: 'prompt tokens' },
    { field: 'completionTokens', className: 'bar-completion', label: 'completion tokens' },
  ], 'Tokens per day');
  barChart($('requests-chart'), days, [{ field: 'requests', className: 'bar-requests', label: 'requests' }], 'Requests per day');

  renderDays($('usage-body'), days);
  const foot = $('usage-total').querySelectorAll('td');
  [total.requests, total.promptTokens, total.completionTokens, total.promptTokens + total.completionTokens].forEach((n, i) => {
    const td = foot[i];
    if (td) td.textContent = formatNumber(n);
  });

  // Per key over the period.
  const names = new Map(state.keys.map((key) => [key.id, key.name]));
  const keyBody = $('usage-by-key-body');
  keyBody.replaceChildren();
  if (keys.length === 0) keyBody.append(el('tr', {}, el('td', { className: 'muted', text: 'No usage in this period.', attrs: { colspan: 5 } })));
  for (const key of keys) {
    // A workload identity (workload:<tag>:<subject>) is no key of the list: it is named by its subject.
    const name = names.get(key.keyId) || workloadName(key.keyId);
    keyBody.append(el('tr', { attrs: { 'data-testid': 'usage-key-row', 'data-key-id': key.keyId } },
      el('th', { attrs: { scope: 'row' } }, el('span', { text: name || key.keyId }), name ? el('span', { className: 'sub', text: key.keyId }) : null),
      el('td', { className: 'num', text: formatNumber(key.requests) }),
      el('td', { className: 'num', text: formatNumber(key.promptTokens) }),
      el('td', { className: 'num', text: formatNumber(key.completionTokens) }),
      el('td', { className: 'num', text: formatNumber(key.promptTokens + key.completionTokens) }),
    ));
  }
}

/**
 * Per day, newest first; a run of days without use is one row ("from – to: no use"), not a screen
 * of zeros (console-format.js's foldIdleDays).
 * @param {HTMLElement} body @param {UsageDay[]} days
 */
function renderDays(body, days) {
  body.replaceChildren();
  for (const row of foldIdleDays(days)) {
    if ('idle' in row) {
      const { from, to } = row.idle;
      body.append(el('tr', { className: 'zero', attrs: { 'data-testid': 'usage-idle-row', 'data-from': from, 'data-to': to } },
        el('th', { text: from === to ? from : `${from} – ${to}`, attrs: { scope: 'row' } }),
        el('td', { text: 'no use', attrs: { colspan: 4 } }),
      ));
      continue;
    }
    const day = row.day;
    body.append(el('tr', { attrs: { 'data-testid': 'usage-row', 'data-date': day.date } },
      el('th', { text: day.date, attrs: { scope: 'row' } }),
      el('td', { className: 'num', text: formatNumber(day.requests) }),
      el('td', { className: 'num', text: formatNumber(day.promptTokens) }),
      el('td', { className: 'num', text: formatNumber(day.completionTokens) }),
      el('td', { className: 'num', text: formatNumber(day.promptTokens + day.completionTokens) }),
    ));
  }
}

/**
 * A table wider than its box scrolls inside it (never the page); its box is marked on the side where
 * more of it is hidden, and the stylesheet fades that edge, so a phone shows there is more to see.
 */
/** @param {Element | null} wrap */
function markScrollEdges(wrap) {
  if (!wrap) return;
  const hidden = wrap.scrollWidth - wrap.clientWidth;
  wrap.classList.toggle('more-left', hidden > 1 && wrap.scrollLeft > 1);
  wrap.classList.toggle('more-right', hidden > 1 && wrap.scrollLeft < hidden - 1);
}

function watchScrollEdges() {
  const wraps = [...$('panel-usage').querySelectorAll('.table-wrap.scroll')];
  // A box changes width with the window, and its table with what is filled in: both are watched.
  const observer = new ResizeObserver((entries) => {
    for (const entry of entries) markScrollEdges(entry.target.closest('.table-wrap'));
  });
  for (const wrap of wraps) {
    wrap.addEventListener('scroll', () => markScrollEdges(wrap), { passive: true });
    observer.observe(wrap);
    if (wrap.firstElementChild) observer.observe(wrap.firstElementChild);
  }
}

let resizeFrame = 0;
function onResize() {
  cancelAnimationFrame(resizeFrame);
  resizeFrame = requestAnimationFrame(() => {
    if (state.usage && !$('panel-usage').hidden) renderUsage();
  });
}

export function wireUsage() {
  $('usage-key').addEventListener('change', loadUsage);
  $('usage-refresh').addEventListener('click', loadUsage);
  window.addEventListener('resize', onResize);
  watchScrollEdges();
  wireBreakdowns();
}
