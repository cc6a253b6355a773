// @ts-check
/*
 * What the console page knows and how it talks to the API: its state, the JSON calls (a same-origin
 * fetch() that carries the page's Origin header on changes; the session is an HttpOnly cookie this
 * page never sees), and the rules it reads from the session to show or hide what the API would refuse.
 */
import { banner } from './console-dom.js';
import { mayManageKey } from './console-format.js';

/** @typedef {import('./console-types.js').Session} Session */
/** @typedef {import('./console-types.js').Key} Key */
/** @typedef {import('./console-types.js').Member} Member */
/** @typedef {import('./console-types.js').UsageRow} UsageRow */
/** @typedef {import('./console-types.js').BudgetSpend} BudgetSpend */
/** @typedef {import('./console-types.js').Permissions} Permissions */

export const API = '/console/api';

/**
 * The page's own moves that its parts call back into, set once by console.js (the parts never import
 * it): entering the console with a session, and going back to signing in.
 */
/** @type {{ enter: (session: Session) => Promise<void>, forget: () => void, signedOut: (message?: string) => void }} */
export const page = {
  enter: async (_session) => {},
  forget: () => {},
  signedOut: (_message) => {},
};

/**
 * @typedef {object} UsageShown
 * @property {string[]} days
 * @property {string} keyId
 * @property {UsageRow[]} data
 * @property {string | undefined} currency
 * @property {BudgetSpend | null | undefined} budget
 */

/**
 * What the page knows; everything is cleared on signing out.
 * @type {{ session: Session | null, keys: Key[], members: Member[], usage: UsageShown | null, tab: string, editing: Key | null }}
 */
export const state = {
  session: null,
  keys: [],
  members: [],
  usage: null,
  tab: 'keys',
  editing: null,
};

// ---------------------------------------------------------------------------------------------
// Talking to the API

export class ApiError extends Error {
  /** @param {number} status @param {{ message?: string, code?: string, param?: string } | null | undefined} error */
  constructor(status, error) {
    super((error?.message) || `The server answered ${status}.`);
    this.status = status;
    this.code = (error?.code) || null;
    this.param = (error?.param) || null;
  }
}

/**
 * A JSON call to the console API; errors are thrown as ApiError with the API's own message. The
 * answer's type is the caller's to name (console-types.js): the API is this page's own.
 * @param {string} method @param {string} path @param {unknown} [body]
 * @returns {Promise<any>}
 */
export async function api(method, path, body) {
  /** @type {Record<string, string>} */
  const headers = { accept: 'application/json' };
  /** @type {RequestInit} */
  const init = { method, credentials: 'same-origin', cache: 'no-store', headers };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
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
    const error = new ApiError(response.status, data?.error);
    // A session that ended (signed out elsewhere, expired): back to signing in.
    if (error.code === 'not_signed_in' && state.session) page.signedOut('Your session has ended. Sign in again.');
    throw error;
  }
  return data;
}

/**
 * Runs `work` with `button` disabled (a click is not sent twice); errors go to `onError`.
 * @template T
 * @param {HTMLButtonElement | HTMLSelectElement | null} button @param {() => Promise<T>} work @param {(error: Error) => void} [onError]
 * @returns {Promise<T | undefined>}
 */
export async function busy(button, work, onError) {
  if (button) button.disabled = true;
  try {
    return await work();
  } catch (error) {
    if (error instanceof ApiError && error.code === 'not_signed_in') return undefined;
    const failure = error instanceof Error ? error : new Error(String(error));
    if (onError) onError(failure);
    else banner(failure.message, 'error');
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

/** @type {Permissions} */
const NOTHING = { createKeys: false, manageKeys: 'none', manageMembers: false, setPolicy: false, readAudit: false };

/** What the signed-in person may do in the current account: the session's answer says (the API decides; the page only reflects it). */
export function can() {
  const session = state.session;
  const permissions = session?.account?.permissions ?? NOTHING;
  return {
    ...permissions,
    /** @param {Key} key */
    manageKey: (key) => mayManageKey(permissions, key, session?.email),
  };
}
