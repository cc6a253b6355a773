// @ts-check
/*
 * The console's Audit tab (owners and platform admins): who did what to which key or member, from
 * where, newest first.
 */
import { $, el, cell } from './console-dom.js';
import { formatDate, formatTime } from './console-format.js';
import { state, api, busy } from './console-state.js';

export async function loadAudit() {
  const body = $('audit-body');
  /** @type {import('./console-types.js').List<import('./console-types.js').AuditEvent> | undefined} */
  const list = await busy($('audit-refresh', HTMLButtonElement), () => api('GET', '/audit'));
  if (!list) return;
  const names = new Map(state.keys.map((key) => [key.id, key.name]));
  body.replaceChildren();
  for (const event of list.data) {
    const name = event.target ? names.get(event.target) : undefined;
    const target = el('span', { className: 'audit-target' }, el('span', { text: name || event.target || '' }), name ? el('span', { className: 'sub', text: event.target || '' }) : null);
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

export function wireAudit() {
  $('audit-refresh').addEventListener('click', loadAudit);
}
