/*
 * The console's Usage tab: the last 30 UTC days of the account (or of one key), as totals, spend
 * against the budget, two bar charts, a table per day (a run of idle days in one row) and one per
 * key, each scrolling sideways in its own box when too wide, and a CSV download; the
 * breakdowns by model and end user are console-breakdown.js's.
 */
import { $, formatNumber, formatAmount, utcDay, el, barChart } from './console-dom.js';
import { API, state, api, busy, keyStatus } from './console-state.js';
import { loadAlerts } from './console-alerts.js';
import { loadBreakdowns, wireBreakdowns } from './console-breakdown.js';

const USAGE_DAYS = 30;
const DAY_MS = 86_400_000;

/** The last USAGE_DAYS days, today (UTC) included, oldest first. */
function usageDays() {
  const today = Date.parse(`${utcDay(Date.now())}T00:00:00Z`);
  const days = [];
  for (let i = USAGE_DAYS - 1; i >= 0; i--) days.push(utcDay(today - i * DAY_MS));
  return days;
}

export function renderUsageKeyOptions() {
  const select = $('usage-key');
  const chosen = select.value;
  select.replaceChildren(el('option', { text: 'All keys', attrs: { value: '' } }));
  for (const key of state.keys) {
    const status = keyStatus(key);
    select.append(el('option', { text: status === 'active' ? key.name : `${key.name} (${status})`, attrs: { value: key.id } }));
  }
  select.value = state.keys.some((key) => key.id === chosen) ? chosen : '';
}

export async function loadUsage() {
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
  loadAlerts();
  await busy(null, () => loadBreakdowns(keyId));
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
    // A workload identity (workload:<tag>:<subject>) is no key of the list: it is named by its subject.
    const workload = /^workload:[0-9a-f]{8}:/.test(key.keyId) ? `${key.keyId.slice(18)} (workload)` : undefined;
    const name = names.get(key.keyId) || workload;
    keyBody.append(el('tr', { attrs: { 'data-testid': 'usage-key-row', 'data-key-id': key.keyId } },
      el('th', { attrs: { scope: 'row' } }, el('span', { text: name || key.keyId }), name ? el('span', { className: 'sub', text: key.keyId }) : null),
      el('td', { className: 'num', text: formatNumber(key.requests) }),
      el('td', { className: 'num', text: formatNumber(key.promptTokens) }),
      el('td', { className: 'num', text: formatNumber(key.completionTokens) }),
      el('td', { className: 'num', text: formatNumber(key.promptTokens + key.completionTokens) }),
    ));
  }
}

const idle = (day) => day.requests === 0 && day.promptTokens === 0 && day.completionTokens === 0;

/**
 * Per day, newest first. A run of days without use is one row ("from – to: no use"), not a screen of
 * zeros; the totals are the days' own sums, so nothing is lost by leaving them out.
 */
function renderDays(body, days) {
  body.replaceChildren();
  const newestFirst = days.slice().reverse();
  for (let i = 0; i < newestFirst.length; i++) {
    const day = newestFirst[i];
    if (idle(day)) {
      let last = i;
      while (last + 1 < newestFirst.length && idle(newestFirst[last + 1])) last++;
      const from = newestFirst[last].date;
      body.append(el('tr', { className: 'zero', attrs: { 'data-testid': 'usage-idle-row', 'data-from': from, 'data-to': day.date } },
        el('th', { text: from === day.date ? from : `${from} – ${day.date}`, attrs: { scope: 'row' } }),
        el('td', { text: 'no use', attrs: { colspan: 4 } }),
      ));
      i = last;
      continue;
    }
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
function markScrollEdges(wrap) {
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
