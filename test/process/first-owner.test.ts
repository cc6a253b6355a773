/**
 * The first owner of a fresh store (admin@localhost): made once, with its grant and membership
 * audited, and one set-password link printed once per store, by the start that made them. Later
 * starts (and other replicas) print no link, which would sit in logs for a week and void the first,
 * but say how to make one. On the file store and on real PostgreSQL, two starts at once included.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseConfig, type Config } from '../../src/config';
import { tokenDigest } from '../../src/accounts/service';
import { banner, firstOwnerLink, FIRST_OWNER_EMAIL } from '../../src/process/startup';
import { openKeyStore } from '../../src/store/open';
import type { GuardedKeyStore } from '../../src/store/guarded';
import { createLogger } from '../../src/telemetry/log';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';

const log = createLogger('silent');
const configOf = (keyStore: Record<string, unknown>): Config => parseConfig({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, keyStore, log: { level: 'silent' } });
const TLS = { fingerprint: 'AA', certFile: 'cert.pem' };
const ADMIN = { address: '127.0.0.1', port: 9464 };

let dir: string;
let database: TestDatabase;
const opened: GuardedKeyStore[] = [];
beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-first-owner-'));
  database = await createTestDatabase();
});
afterAll(async () => {
  await Promise.all(opened.map((store) => store.close()));
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

async function open(config: Config): Promise<GuardedKeyStore> {
  const store = await openKeyStore(config);
  opened.push(store);
  return store;
}

test('the start that makes the first owner prints one link; later starts print none, and the first link still works', async () => {
  const config = configOf({ type: 'sqlite', path: path.join(dir, 'chatgate.db') });
  const store = await open(config);
  const first = await firstOwnerLink(config, log, store);
  expect(first).toEqual({ email: FIRST_OWNER_EMAIL, token: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/) });
  const token = (first as { token: string }).token;
  expect(banner(config, 8443, ADMIN, TLS, { firstOwner: first })).toContain(`#set-password=${token}`);

  // Every change of the first start is audited, by `first-start`: the membership and the admin grant.
  const audit = await store.listAudit(null, 50);
  expect(audit.filter((event) => event.actor === 'first-start').map((event) => [event.action, event.target]).sort()).toEqual([
    ['admin.granted', FIRST_OWNER_EMAIL],
    ['member.added', FIRST_OWNER_EMAIL],
    ['password.link_created', FIRST_OWNER_EMAIL],
  ]);
  expect((await store.getPerson(FIRST_OWNER_EMAIL))?.admin).toBe(true);

  // The next starts, the password still unset: no new link (none voids the first), a line saying how.
  for (let start = 0; start < 2; start++) {
    const again = await firstOwnerLink(config, log, store);
    expect(again).toEqual({ email: FIRST_OWNER_EMAIL, needsLink: true });
    const text = banner(config, 8443, ADMIN, TLS, { firstOwner: again });
    expect(text).not.toContain('set-password');
    expect(text).toContain('chatgate members password-link --email admin@localhost');
  }
  expect((await store.listAudit(null, 50)).filter((event) => event.action === 'password.link_created')).toHaveLength(1);
  expect(await store.takeToken(tokenDigest(token), 'password', new Date())).toMatchObject({ email: FIRST_OWNER_EMAIL });

  // With a password set, a start says nothing about the first owner.
  await store.setPassword(FIRST_OWNER_EMAIL, 'scrypt$not-a-real-hash');
  expect(await firstOwnerLink(config, log, store)).toBeUndefined();
});

test('two replicas starting at once on one PostgreSQL store: one first owner, one link between them', async () => {
  const config = configOf({ type: 'postgres', url: database.url });
  const replicas = await Promise.all([open(config), open(config), open(config)]);
  const answers = await Promise.all(replicas.map((store) => firstOwnerLink(config, log, store)));
  const links = answers.filter((answer) => answer && 'token' in answer);
  expect(links).toHaveLength(1);
  expect(answers.filter((answer) => answer && 'needsLink' in answer)).toHaveLength(2);
  const store = replicas[0]!;
  expect((await store.listMembers('acc_default')).map((m) => [m.email, m.role])).toEqual([[FIRST_OWNER_EMAIL, 'owner']]);
  // The one link printed is the one that works.
  expect(await store.takeToken(tokenDigest((links[0] as { token: string }).token), 'password', new Date())).toMatchObject({ email: FIRST_OWNER_EMAIL });
});
