// @ts-check
/*
 * The one key form (#key-form, in #key-dialog), for creating a key and for editing one: one set of
 * fields and one way to fill, read and send them. Opened empty it creates (the answer's secret goes to
 * the caller to show once); opened with a key it edits, sending only what changed. What is sent is
 * console-format.js's keyBody.
 */
import { $, setError, banner } from './console-dom.js';
import { DAY_MS, LIMIT_FIELDS, keyBody, keyFormValues, utcDay } from './console-format.js';
import { state, api, busy } from './console-state.js';

/** @typedef {import('./console-types.js').Key} Key */
/** @typedef {import('./console-format.js').KeyFormValues} KeyFormValues */

const input = (/** @type {string} */ id) => $(`key-form-${id}`, HTMLInputElement);
const endpointBoxes = () => /** @type {HTMLInputElement[]} */ (Array.from($('key-form-endpoints').querySelectorAll('input[name="endpoints"]')));

/** @param {KeyFormValues} values */
function fill(values) {
  input('name').value = values.name;
  input('models').value = values.models;
  for (const box of endpointBoxes()) box.checked = values.endpoints.includes(box.value);
  input('allowed-ips').value = values.allowedIps;
  input('expires').value = values.expires;
  for (const limit of LIMIT_FIELDS) {
    const value = values.limits[limit.id];
    input(limit.id).value = value === null || value === undefined ? '' : String(value);
  }
}

/** What the form holds; throws a message naming a number field that is not one. @returns {KeyFormValues} */
function read() {
  /** @type {Record<string, number | null>} */
  const limits = {};
  for (const limit of LIMIT_FIELDS) {
    const field = input(limit.id);
    limits[limit.id] = limit.read(field.value, limit.label, field.validity.badInput);
  }
  return {
    name: input('name').value,
    models: input('models').value,
    endpoints: endpointBoxes().filter((box) => box.checked).map((box) => box.value),
    allowedIps: input('allowed-ips').value,
    expires: input('expires').value,
    limits,
  };
}

/** @type {(created: Key) => Promise<void>} */
let onCreated = async () => {};
/** @type {() => Promise<void>} */
let onSaved = async () => {};

/** Opens the form: empty to create a key, or filled from `key` to edit it. @param {Key | null} key */
export function openKeyForm(key) {
  state.editing = key;
  $('key-form', HTMLFormElement).reset();
  setError($('key-form-error'), null);
  $('key-form-title').textContent = key ? `Edit key “${key.name}”` : 'Create a key';
  $('key-form-submit').textContent = key ? 'Save' : 'Create key';
  input('expires').min = utcDay(Date.now() + DAY_MS);
  if (key) fill(keyFormValues(key));
  $('key-dialog', HTMLDialogElement).showModal();
  input('name').focus();
}

/** @param {SubmitEvent} event */
async function onSubmit(event) {
  event.preventDefault();
  const key = state.editing;
  const errorBox = $('key-form-error');
  setError(errorBox, null);
  let body;
  try {
    body = keyBody(read(), key);
  } catch (error) {
    setError(errorBox, /** @type {Error} */ (error));
    return;
  }
  const dialog = $('key-dialog', HTMLDialogElement);
  if (key && Object.keys(body).length === 0) {
    dialog.close();
    return;
  }
  await busy($('key-form-submit', HTMLButtonElement), async () => {
    if (key) {
      /** @type {Key} */
      const saved = await api('PATCH', `/keys/${encodeURIComponent(key.id)}`, body);
      // The list is read again first: once the dialog is gone, the row shows what was saved.
      await onSaved();
      dialog.close();
      banner(`Key “${saved.name}” is saved.`, 'success');
    } else {
      /** @type {Key} */
      const created = await api('POST', '/keys', body);
      dialog.close();
      await onCreated(created);
    }
  }, (error) => setError(errorBox, error));
}

/** Empties the form and closes it (signing out). */
export function forgetKeyForm() {
  $('key-form', HTMLFormElement).reset();
  setError($('key-form-error'), null);
  $('key-form-title').replaceChildren();
  const dialog = $('key-dialog', HTMLDialogElement);
  if (dialog.open) dialog.close();
}

/**
 * @param {{ created: (created: Key) => Promise<void>, saved: () => Promise<void> }} then what follows a
 * key made (its secret shown once) or saved (the list read again)
 */
export function wireKeyForm(then) {
  onCreated = then.created;
  onSaved = then.saved;
  $('key-form').addEventListener('submit', onSubmit);
  $('key-form').addEventListener('input', () => setError($('key-form-error'), null));
  $('key-form-cancel').addEventListener('click', () => $('key-dialog', HTMLDialogElement).close());
  $('key-dialog').addEventListener('close', () => {
    state.editing = null;
  });
}
