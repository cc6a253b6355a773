/**
 * The account every key made before accounts existed belongs to, and every key made without naming
 * one: `default`, with the same id in every store (the PostgreSQL migration and the file store's
 * reading of a version 1 file create it under that id too).
 */
import { DEFAULT_ACCOUNT_NAME, DuplicateRecord, NO_BUDGET, NO_QUOTA, type AccountStore } from './types';

export const DEFAULT_ACCOUNT_ID = 'acc_default';

/** The default account's id, made if the store has none yet (two processes at once make it once). */
export async function defaultAccountId(store: AccountStore, now = new Date()): Promise<string> {
  const found = await store.findAccountByName(DEFAULT_ACCOUNT_NAME);
  if (found) return found.id;
  try {
    await store.createAccount({ id: DEFAULT_ACCOUNT_ID, name: DEFAULT_ACCOUNT_NAME, createdAt: now.toISOString(), quota: { ...NO_QUOTA }, budget: { ...NO_BUDGET } });
    return DEFAULT_ACCOUNT_ID;
  } catch (err) {
    // Another process made it first: under this id (DuplicateRecord of the id) or this name (AccountNameTaken).
    if (!(err instanceof DuplicateRecord && err.kind === 'account')) throw err;
    const made = await store.findAccountByName(DEFAULT_ACCOUNT_NAME);
    if (!made) throw err;
    return made.id;
  }
}
