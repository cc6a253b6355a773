// @ts-check
/*
 * The console's DOM helpers, its bar chart and its own confirm dialog: plain browser
 * JavaScript (an ES module, no build step). The rules every console module keeps: elements made with
 * createElement / createElementNS, text set with textContent (never innerHTML: names and emails come
 * from people), styles by class only (the page's Content-Security-Policy allows no inline style).
 * What needs no DOM (formatting, the rules, the sums) is console-format.js's.
 */
import { formatNumber, compactNumber, niceCeiling } from './console-format.js';

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * The page's element with this id, of the kind asked (`HTMLInputElement`...; else any element): a
 * missing one, or one of another kind, is the page's own fault, thrown at once.
 * @template {HTMLElement} [T=HTMLElement]
 * @param {string} id
 * @param {{ new (): T, prototype: T }} [kind]
 * @returns {T}
 */
export function $(id, kind) {
  const element = document.getElementById(id);
  if (!element) throw new Error(`The page has no #${id}.`);
  if (kind && !(element instanceof kind)) throw new Error(`The page's #${id} is no ${kind.name}.`);
  return /** @type {T} */ (element);
}

/**
 * @typedef {object} ElementOptions
 * @property {string} [className]
 * @property {string} [text]
 * @property {Record<string, string | number | boolean | null | undefined>} [attrs]
 */

/**
 * An element with classes, attributes and children (strings become text nodes).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {ElementOptions} [options]
 * @param {...(Node | string | null | undefined | false)} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, options = {}, ...children) {
  const element = document.createElement(tag);
  if (options.className) element.className = options.className;
  if (options.text !== undefined) element.textContent = options.text;
  for (const [name, value] of Object.entries(options.attrs || {})) {
    if (value !== undefined && value !== null && value !== false) element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    element.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return element;
}

/** @param {string} tag @param {Record<string, string | number>} [attrs] @returns {SVGElement} */
export function svg(tag, attrs = {}) {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  return element;
}

/**
 * A table cell that carries its column's name (shown in the stacked card layout on a phone).
 * @param {string} label @param {Node | string | null | undefined} content @param {string} [className]
 */
export function cell(label, content, className) {
  const td = el('td', { className, attrs: { 'data-label': label } });
  if (typeof content === 'string') td.textContent = content;
  else if (content) td.append(content);
  return td;
}

/** @param {HTMLElement} element @param {Error | string | null | undefined} error */
export function setError(element, error) {
  const message = error ? (typeof error === 'string' ? error : error.message) : '';
  element.textContent = message;
  element.hidden = !message;
}

/** @type {ReturnType<typeof setTimeout> | undefined} */
let bannerTimer;
/** A message at the top of the page: 'info', 'success' or 'error'. @param {string} message @param {'info' | 'success' | 'error'} [kind] */
export function banner(message, kind = 'info') {
  const box = $('banner');
  clearTimeout(bannerTimer);
  box.replaceChildren();
  if (!message) {
    box.hidden = true;
    return;
  }
  box.className = `banner banner-${kind}`;
  box.setAttribute('role', kind === 'error' ? 'alert' : 'status');
  const dismiss = el('button', { className: 'link-button', text: 'Dismiss', attrs: { type: 'button', 'data-testid': 'banner-dismiss' } });
  dismiss.addEventListener('click', () => banner(''));
  box.append(el('span', { className: 'banner-text', text: message, attrs: { 'data-testid': 'banner-text' } }), dismiss);
  box.hidden = false;
  if (kind === 'success') bannerTimer = setTimeout(() => banner(''), 8000);
}

/** Copies text with the asynchronous clipboard API; else selects it for the person to copy. @param {string} text @param {Node} source @param {HTMLElement} stateElement */
export async function copyText(text, source, stateElement) {
  try {
    await navigator.clipboard.writeText(text);
    stateElement.textContent = 'Copied to the clipboard.';
    stateElement.className = 'copy-state copied';
  } catch {
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection?.removeAllRanges();
    selection?.addRange(range);
    stateElement.textContent = 'Copying was not allowed: the text is selected, press Ctrl+C (⌘C) to copy it.';
    stateElement.className = 'copy-state';
  }
}

/**
 * @typedef {object} Series
 * @property {'requests' | 'promptTokens' | 'completionTokens'} field
 * @property {string} className
 * @property {string} label
 */

/**
 * A bar chart as SVG: one group a day (oldest left), the series stacked; sized to its box.
 * @param {HTMLElement} box @param {import('./console-types.js').UsageDay[]} days @param {Series[]} series @param {string} title
 */
export function barChart(box, days, series, title) {
  const width = Math.max(280, Math.floor(box.clientWidth || 600));
  const height = width < 500 ? 150 : 190;
  const margin = { top: 12, right: 8, bottom: 24, left: 44 };
  const plotWidth = width - margin.left - margin.right;
  const plotHeight = height - margin.top - margin.bottom;
  const totals = days.map((day) => series.reduce((sum, s) => sum + day[s.field], 0));
  const max = niceCeiling(Math.max(0, ...totals));
  const sum = totals.reduce((a, b) => a + b, 0);

  const chart = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', class: 'bar-chart', 'data-testid': 'chart-svg' });
  const label = `${title}, ${days[0]?.date} to ${days[days.length - 1]?.date}: ${formatNumber(sum)} in total, at most ${formatNumber(Math.max(0, ...totals))} a day.`;
  chart.setAttribute('aria-label', label);
  const titleElement = svg('title');
  titleElement.textContent = label;
  chart.append(titleElement);

  // Grid lines and their values: 0, half, max.
  for (const fraction of [0, 0.5, 1]) {
    const y = margin.top + plotHeight - fraction * plotHeight;
    chart.append(svg('line', { x1: margin.left, x2: width - margin.right, y1: y, y2: y, class: fraction === 0 ? 'axis' : 'grid' }));
    const tick = svg('text', { x: margin.left - 6, y: y + 4, class: 'tick tick-y', 'text-anchor': 'end' });
    tick.textContent = compactNumber(Math.round(max * fraction));
    chart.append(tick);
  }

  const slot = plotWidth / days.length;
  const gap = Math.min(2, slot * 0.15);
  const labelEvery = Math.max(1, Math.ceil(44 / slot));
  days.forEach((day, i) => {
    const x = margin.left + i * slot;
    const group = svg('g', { class: 'day', 'data-date': day.date, 'data-total': totals[i] ?? 0 });
    const tip = svg('title');
    tip.textContent = `${day.date}: ${series.map((s) => `${formatNumber(day[s.field])} ${s.label}`).join(', ')}`;
    group.append(tip);
    // The whole column takes the pointer, so a zero day has its tooltip too.
    group.append(svg('rect', { x, y: margin.top, width: slot, height: plotHeight, class: 'hit' }));
    let base = margin.top + plotHeight;
    for (const s of series) {
      const value = day[s.field];
      if (value <= 0) continue;
      const h = Math.max(1, (value / max) * plotHeight);
      base -= h;
      group.append(svg('rect', { x: x + gap, y: base, width: Math.max(1, slot - 2 * gap), height: h, class: `bar ${s.className}`, 'data-value': value }));
    }
    chart.append(group);
    // Dates under the bars, counted back from today; the last one kept inside the chart.
    if ((days.length - 1 - i) % labelEvery === 0) {
      const last = i === days.length - 1;
      const tick = svg('text', { x: last ? x + slot : x + slot / 2, y: height - 6, class: 'tick tick-x', 'text-anchor': last ? 'end' : 'middle' });
      tick.textContent = day.date.slice(5);
      chart.append(tick);
    }
  });
  box.replaceChildren(chart);
}

// ---------------------------------------------------------------------------------------------
// Asking first: a dialog of the page's own

/** @type {((confirmed: boolean) => void) | null} */
let confirmResolve = null;

/**
 * Shows the confirm dialog; resolves true when the person confirms, false otherwise. `grace`: it also
 * asks how long a rotated key's current secret keeps working (read from #confirm-grace once confirmed).
 */
/**
 * @param {{ title: string, text: string, confirm: string, grace?: boolean }} what
 * @returns {Promise<boolean>}
 */
export function confirmDialog({ title, text, confirm, grace = false }) {
  const dialog = $('confirm-dialog', HTMLDialogElement);
  if (confirmResolve) confirmResolve(false);
  $('confirm-title').textContent = title;
  $('confirm-text').textContent = text;
  $('confirm-ok').textContent = confirm;
  $('confirm-grace-field').hidden = !grace;
  $('confirm-grace', HTMLSelectElement).value = '0';
  dialog.returnValue = '';
  return new Promise((resolve) => {
    confirmResolve = resolve;
    dialog.showModal();
    $('confirm-cancel').focus();
  });
}

export function wireConfirmDialog() {
  $('confirm-dialog').addEventListener('close', () => {
    const resolve = confirmResolve;
    confirmResolve = null;
    if (resolve) resolve($('confirm-dialog', HTMLDialogElement).returnValue === 'confirm');
  });
}
