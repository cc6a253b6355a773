/**
 * Which contract file answers for each method of the store interfaces (src/store/types.ts). Typed, so
 * a method added to KeyStore or AccountStore without an entry here fails the type check; and each
 * contract file ends with a test that every method it answers for was called on every backend (its
 * handles record the calls), so an entry with no test behind it fails too. contract-methods.test.ts
 * holds this list to the methods the stores and fakes really have.
 */
import type { Store } from '../../src/store/types';

export type ContractFile = 'contract' | 'identity-contract' | 'account-contract' | 'session-audit-contract' | 'usage-contract' | 'alerts';

export const CONTRACT_FILES = {
  // KeyStore: on the file fake, SQLite and PostgreSQL.
  findByDigest: 'contract',
  get: 'contract',
  list: 'contract',
  listExpiring: 'contract',
  hasKeys: 'contract',
  insert: 'contract',
  update: 'contract',
  revoke: 'contract',
  rotate: 'contract',
  recordUse: 'contract',
  onChange: 'contract',
  changeFeedLive: 'contract',
  ping: 'contract',
  close: 'contract',
  // AccountStore: on the file fake, SQLite, PostgreSQL and the memory fake.
  createAccount: 'account-contract',
  getAccount: 'account-contract',
  findAccountByName: 'account-contract',
  listAccounts: 'account-contract',
  updateAccount: 'account-contract',
  getPerson: 'account-contract',
  putPerson: 'account-contract',
  setPassword: 'identity-contract',
  findIdentity: 'identity-contract',
  identitiesOf: 'identity-contract',
  bindIdentity: 'identity-contract',
  putMember: 'account-contract',
  setMemberRole: 'account-contract',
  removeMember: 'account-contract',
  listMembers: 'account-contract',
  membershipsOf: 'account-contract',
  createSession: 'session-audit-contract',
  findSession: 'session-audit-contract',
  updateSession: 'session-audit-contract',
  deleteSession: 'session-audit-contract',
  deleteSessionsOf: 'identity-contract',
  createToken: 'identity-contract',
  takeToken: 'identity-contract',
  findToken: 'identity-contract',
  bumpCounters: 'identity-contract',
  clearCounters: 'identity-contract',
  appendAudit: 'session-audit-contract',
  listAudit: 'session-audit-contract',
  usage: 'usage-contract',
  usageBreakdown: 'usage-contract',
  pruneUsage: 'usage-contract',
  addQuotaUsage: 'usage-contract',
  quotaUsage: 'usage-contract',
  claimAlert: 'alerts',
  alertSent: 'alerts',
  listAlerts: 'alerts',
  listUnsentAlerts: 'alerts',
  getServerSecret: 'usage-contract',
  putServerSecret: 'usage-contract',
} as const satisfies Record<keyof Store, ContractFile>;

/** The methods (and the one property, changeFeedLive) a contract file answers for. */
export function methodsOf(file: ContractFile): string[] {
  return Object.entries(CONTRACT_FILES)
    .filter(([, owner]) => owner === file)
    .map(([method]) => method)
    .sort();
}

/**
 * A handle that notes each method called on it (and each property read) in `called`. Calls are made
 * on the store itself, so what a store calls on itself is not counted: only what a test called.
 */
export function recorded<T extends object>(store: T, called: Set<string>): T {
  return new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof property !== 'string') return value;
      if (typeof value !== 'function') {
        called.add(property);
        return value;
      }
      return (...args: unknown[]) => {
        called.add(property);
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

/** What a contract file answers for that no test called on this backend's handles: [] when every method was. */
export function notCalled(file: ContractFile, called: ReadonlySet<string>): string[] {
  return methodsOf(file).filter((method) => !called.has(method));
}
