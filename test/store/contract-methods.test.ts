/**
 * The contract's list of methods (contract-methods.ts) is the interfaces' list. Its type holds it to
 * Store's keys; here, at run time, the memory fake's methods (all of AccountStore, nothing else) are
 * exactly its AccountStore part, and the file fake and both SQL stores answer every method in it.
 */
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { CountingKeyStore } from '../fakes/counting-key-store';
import { FileKeyStore } from '../fakes/file-store';
import { MemoryAccountStore } from '../fakes/memory-account-store';
import { CONTRACT_FILES, methodsOf, recorded } from './contract-methods';

/** The public methods and accessors a class's prototypes (its own and its parents') define. */
function publicMembers(type: { prototype: object }, privateNames: readonly string[] = []): string[] {
  const names = new Set<string>();
  for (let proto = type.prototype; proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    for (const name of Object.getOwnPropertyNames(proto)) if (name !== 'constructor' && !privateNames.includes(name)) names.add(name);
  }
  return [...names].sort();
}

const KEY_METHODS = Object.keys(CONTRACT_FILES).filter((method) => CONTRACT_FILES[method as keyof typeof CONTRACT_FILES] === 'contract');
const ALL = Object.keys(CONTRACT_FILES).sort();

test('the memory fake answers exactly the AccountStore methods the contract lists', () => {
  expect(publicMembers(MemoryAccountStore)).toEqual(ALL.filter((method) => !KEY_METHODS.includes(method)));
});

test('the file fake, SQLite, PostgreSQL and the counting key fake answer every method the contract lists', () => {
  const { findByDigest } = CONTRACT_FILES; // a key store method is listed (this file would not compile without it)
  expect(findByDigest).toBe('contract');
  for (const type of [FileKeyStore, SqliteKeyStore, PostgresKeyStore, CountingKeyStore]) {
    const members = publicMembers(type);
    expect(ALL.filter((method) => method !== 'changeFeedLive' && !members.includes(method))).toEqual([]);
  }
});

test('every contract file answers for at least one method, and the lists do not overlap', () => {
  const files = ['contract', 'identity-contract', 'account-contract', 'session-audit-contract', 'usage-contract', 'alerts'] as const;
  const listed = files.flatMap((file) => methodsOf(file));
  for (const file of files) expect(methodsOf(file).length).toBeGreaterThan(0);
  expect(listed.sort()).toEqual(ALL);
});

test('a recorded handle notes the methods called and the properties read, not what the store calls on itself', async () => {
  const called = new Set<string>();
  const handle = recorded(new MemoryAccountStore(), called);
  await handle.createAccount({ id: 'acc_r', name: 'r', createdAt: '2031-01-01T00:00:00.000Z', quota: { tokensPerDay: null, tokensPerMonth: null }, budget: { perDay: null, perMonth: null } });
  expect(await handle.getAccount('acc_r')).toMatchObject({ name: 'r' });
  expect([...called].sort()).toEqual(['createAccount', 'getAccount']);
});
