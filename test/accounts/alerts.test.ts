/**
 * Quota and budget alerts (src/accounts/alerts.ts) against a webhook receiver on a real loopback
 * socket and the store fake: the payload (its text reads as a sentence; money in the currency,
 * quotas in tokens); two replicas told the same crossing POST it once; a receiver that fails is
 * tried again with backoff until it answers; one that never does gets five tries, the alert is
 * audited as failed and the URL (a secret, as Slack's are) is in no log line or audit entry; a
 * redirect is not followed; with no webhook the alert is kept and audited.
 */
import http from 'node:http';
import { Writable } from 'node:stream';
import { Alerts, alertPayload } from '../../src/accounts/alerts';
import { Auditor } from '../../src/accounts/audit';
import type { Crossing } from '../../src/accounts/quota-scopes';
import { createLogger } from '../../src/telemetry/log';
import type { AlertRecord, Store } from '../../src/store/types';
import { CountingKeyStore } from '../fakes/counting-key-store';
import { listenOnLoopback } from '../helpers/net';
import { issueKey } from '../../src/auth/issue';
import { parseConfig } from '../../src/config';
import { eventually } from '../helpers/time';

const SECRET_PATH = '/services/T000/B000/XXXXsecretwebhooktoken';

class Receiver {
  readonly bodies: Array<Record<string, unknown>> = [];
  /** What the next answers are (then 200). */
  answers: number[] = [];
  server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    req.on('end', () => {
      this.bodies.push({ ...(JSON.parse(text) as Record<string, unknown>), _path: req.url, _type: req.headers['content-type'] });
      const status = this.answers.shift() ?? 200;
      res.writeHead(status, status === 302 ? { location: 'http://127.0.0.1:9/elsewhere' } : {});
      res.end();
    });
  });
  url = '';
  async start() {
    this.url = (await listenOnLoopback(this.server)) + SECRET_PATH;
    return this;
  }
  stop() {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(resolve));
  }
}

let receiver: Receiver;
beforeEach(async () => {
  receiver = await new Receiver().start();
});
afterEach(() => receiver.stop());

function setup(webhookUrl: string | undefined, store = new CountingKeyStore(), allowPrivateAccountWebhooks = false) {
  const lines: string[] = [];
  const log = createLogger('info', new Writable({
    write: (chunk, _enc, done) => {
      lines.push(String(chunk));
      done();
    },
  }) as never);
  const make = (seen: Store = store) => new Alerts(seen, new Auditor(store, log), { webhookUrl, allowPrivateAccountWebhooks, timeoutMs: 1000, currency: 'EUR' }, log, () => new Date(), () => new Promise((resolve) => setTimeout(resolve, 5)));
  return { store, lines, make };
}

async function account(store: CountingKeyStore, name: string) {
  const id = `acc_${name}`;
  await store.createAccount({ id, name, createdAt: new Date().toISOString(), quota: { tokensPerDay: null, tokensPerMonth: null }, budget: { perDay: 50, perMonth: null } });
  return id;
}

const today = new Date().toISOString().slice(0, 10);
const crossing = (accountId: string, threshold: number, scope = `budget:account:${accountId}:d:${today}`): Crossing => ({
  scope,
  accountId,
  keyId: undefined,
  period: 'day',
  periodStart: today,
  threshold,
  used: 40.5e9,
  limit: 50e9,
});

test('the payload: the fields the contract names, and a text that reads well', () => {
  const record: AlertRecord = { id: 'x', accountId: 'acc_1', keyId: null, kind: 'budget', period: 'day', periodStart: '2026-11-29', threshold: 0.8, spent: 40.5, limit: 50, at: '', sentAt: null };
  expect(alertPayload(record, 'Research', undefined, 'USD')).toEqual({
    event: 'budget.threshold',
    accountId: 'acc_1',
    accountName: 'Research',
    threshold: 0.8,
    period: 'day',
    periodStart: '2026-11-29',
    spent: 40.5,
    budget: 50,
    currency: 'USD',
    text: 'Account “Research” has used 80% of its daily budget: 40.50 of 50.00 USD (2026-11-29, UTC).',
  });
  const quota = alertPayload({ ...record, kind: 'tokens', keyId: 'key_1', period: 'month', periodStart: '2026-11', threshold: 1, spent: 1_000_250, limit: 1_000_000 }, 'Research', 'ci-bot', 'USD');
  expect(quota).toMatchObject({ event: 'quota.threshold', keyId: 'key_1', keyName: 'ci-bot', currency: 'tokens', spent: 1_000_250, budget: 1_000_000 });
  expect(quota.text).toBe('Key “ci-bot” of account “Research” has used 100% of its monthly token quota: 1,000,250 of 1,000,000 tokens (2026-11, UTC).');
});

test('two replicas told the same crossing: one POST, as JSON, audited once', async () => {
  const { store, make } = setup(receiver.url);
  const id = await account(store, 'twice');
  const [a, b] = [make(), make()];
  a.crossed('budget', crossing(id, 0.8));
  b.crossed('budget', crossing(id, 0.8));
  await eventually(async () => ((await store.listAudit(id, 10)).some((event) => event.action === 'alert.sent') ? true : undefined));
  await Promise.all([a.stop(), b.stop()]);
  expect(receiver.bodies).toHaveLength(1);
  expect(receiver.bodies[0]).toMatchObject({ event: 'budget.threshold', accountId: id, accountName: 'twice', threshold: 0.8, spent: 40.5, budget: 50, currency: 'EUR', _type: 'application/json', _path: SECRET_PATH });
  const audit = (await store.listAudit(id, 10)).filter((event) => event.action.startsWith('alert.'));
  expect(audit.map((event) => [event.action, event.actor, event.details?.delivery])).toEqual([['alert.sent', 'chatgate', 'webhook']]);
  expect((await store.listAlerts(id, new Date(0)))[0]?.sentAt).not.toBeNull();
});

test('a receiver that fails twice is tried again until it answers: one alert delivered on the third try', async () => {
  const { store, make } = setup(receiver.url);
  const id = await account(store, 'retried');
  receiver.answers = [500, 503];
  const alerts = make();
  alerts.crossed('budget', crossing(id, 0.5));
  await eventually(async () => ((await store.listAudit(id, 10)).some((event) => event.action === 'alert.sent') ? true : undefined));
  await alerts.stop();
  expect(receiver.bodies.map((body) => body.threshold)).toEqual([0.5, 0.5, 0.5]);
});

test('a receiver that never takes it: five tries, audited as failed, and the URL in no log line or audit entry', async () => {
  const { store, lines, make } = setup(receiver.url);
  const id = await account(store, 'failing');
  receiver.answers = [500, 500, 500, 500, 500, 500];
  const alerts = make();
  alerts.crossed('budget', crossing(id, 1));
  await eventually(async () => ((await store.listAudit(id, 10)).some((event) => event.action === 'alert.failed') ? true : undefined));
  await alerts.stop();
  expect(receiver.bodies).toHaveLength(5);
  expect((await store.listAlerts(id, new Date(0)))[0]?.sentAt).toBeNull(); // unsent: another replica may take it over once the lease ends
  const everything = lines.join('') + JSON.stringify(await store.listAudit(id, 10));
  expect(everything).toContain('the alert webhook answered 500');
  expect(everything).not.toContain('secretwebhooktoken');
  expect(everything).not.toContain(receiver.url);
});

test('a redirect is not followed (the alert goes only where it was configured to)', async () => {
  const { store, make } = setup(receiver.url);
  const id = await account(store, 'redirected');
  receiver.answers = [302, 302, 302, 302, 302];
  const alerts = make();
  alerts.crossed('budget', crossing(id, 0.5));
  await eventually(async () => ((await store.listAudit(id, 10)).some((event) => event.action === 'alert.failed') ? true : undefined));
  await alerts.stop();
  expect(receiver.bodies.every((body) => body._path === SECRET_PATH)).toBe(true);
});

test('with no webhook the alert is kept (for the console) and audited', async () => {
  const { store, make } = setup(undefined);
  const id = await account(store, 'quiet');
  const alerts = make();
  alerts.crossed('tokens', { ...crossing(id, 0.5, `account:${id}:m:${today.slice(0, 7)}`), period: 'month', periodStart: today.slice(0, 7), used: 600, limit: 1000 });
  await eventually(async () => ((await store.listAudit(id, 10)).some((event) => event.action === 'alert.sent') ? true : undefined));
  await alerts.stop();
  expect(receiver.bodies).toHaveLength(0);
  expect(await store.listAlerts(id, new Date(0))).toEqual([expect.objectContaining({ id: `tokens:account:${id}:m:${today.slice(0, 7)}:0.5`, kind: 'tokens', period: 'month', spent: 600, limit: 1000 })]);
  expect((await store.listAudit(id, 10)).find((event) => event.action === 'alert.sent')?.details?.delivery).toBe('no webhook');
});

test('config: thresholds ascending in (0, 1], an http(s) webhook, no unknown field; a bad URL is not echoed', async () => {
  const minimal = { providers: { mock: { workers: ['http://127.0.0.1:9'] } } };
  expect(parseConfig(minimal).alerts).toEqual({ thresholds: [0.5, 0.8, 1], allowPrivateAccountWebhooks: false, timeoutMs: 5000, expiringCheckMs: 600_000 });
  expect(parseConfig({ ...minimal, alerts: { webhookUrl: 'https://hooks.example.com/x', thresholds: [0.9] } }).alerts.thresholds).toEqual([0.9]);
  for (const thresholds of [[], [0], [1.5], [0.8, 0.5], [0.5, 0.5], Array(11).fill(0.5)]) {
    expect(() => parseConfig({ ...minimal, alerts: { thresholds } })).toThrow(/alerts\.thresholds/);
  }
  expect(() => parseConfig({ ...minimal, alerts: { webhook: 'https://hooks.example.com/x' } })).toThrow(/alerts/);
  let message = '';
  try {
    parseConfig({ ...minimal, alerts: { webhookUrl: 'ftp://user:TOPSECRET@hooks.example.com/x' } });
  } catch (err) {
    message = (err as Error).message;
  }
  expect(message).toMatch(/alerts\.webhookUrl/);
  expect(message).not.toContain('TOPSECRET');
});

test('keys that expire within a week: one key.expiring POST each, however many replicas look and however often', async () => {
  const { store, make } = setup(receiver.url);
  const id = await account(store, 'expiring');
  const soon = await issueKey(store, { name: 'expires in three days', accountId: id, expiresAt: new Date(Date.now() + 3 * 86_400_000) });
  await issueKey(store, { name: 'expires in ten days', accountId: id, expiresAt: new Date(Date.now() + 10 * 86_400_000) });
  const revoked = await issueKey(store, { name: 'revoked, expiring', accountId: id, expiresAt: new Date(Date.now() + 2 * 86_400_000) });
  await store.revoke(revoked.record.id, new Date());
  // Each replica's looks, counted as it lists the expiring keys: a look starts only once the one before
  // it has claimed (or not) each key's alert, and stop() waits for the POSTs under way; so three more
  // looks each mean at least two whole looks by each replica after the first POST came.
  const looks = [0, 0];
  const counted = (replica: number): Store =>
    new Proxy(store, {
      get(target, name) {
        if (name === 'listExpiring') {
          return (from: Date, to: Date) => {
            looks[replica]!++;
            return target.listExpiring(from, to);
          };
        }
        const value = Reflect.get(target, name, target) as unknown;
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  const [a, b] = [make(counted(0)), make(counted(1))];
  a.watchExpiries(50);
  b.watchExpiries(50);
  await eventually(() => (receiver.bodies.length > 0 ? true : undefined));
  const after = [...looks];
  await eventually(() => (looks.every((count, replica) => count >= after[replica]! + 3) ? true : undefined));
  await Promise.all([a.stop(), b.stop()]);
  expect(receiver.bodies).toHaveLength(1);
  expect(receiver.bodies[0]).toMatchObject({ event: 'key.expiring', accountId: id, accountName: 'expiring', keyId: soon.record.id, keyName: 'expires in three days', expiresAt: soon.record.expiresAt });
  expect(String(receiver.bodies[0]!.text)).toMatch(/^Key “expires in three days” of account “expiring” expires on \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC: rotate it/);
});

test("names chosen by users cannot ping a channel or dress up a link in the webhook's text; their own fields keep them", async () => {
  const record: AlertRecord = { id: 'x', accountId: 'acc_1', keyId: 'key_1', kind: 'tokens', period: 'day', periodStart: '2026-11-29', threshold: 0.5, spent: 50, limit: 100, at: '', sentAt: null };
  const hostile = '<!channel> Re-authenticate at <https://evil.example|https://chatgate.corp> & now';
  const payload = alertPayload(record, hostile, hostile, 'USD');
  expect(payload.text).not.toMatch(/[<>]/);
  expect(payload.text).toContain('&lt;!channel&gt; Re-authenticate at &lt;https://evil.example|https://chatgate.corp&gt; &amp; now');
  expect([payload.accountName, payload.keyName]).toEqual([hostile, hostile]);
});

test('an alert whose every try failed is sent again once its lease has run out and the webhook answers', async () => {
  const store = new CountingKeyStore();
  const lines: string[] = [];
  const log = createLogger('info', new Writable({
    write: (chunk, _enc, done) => {
      lines.push(String(chunk));
      done();
    },
  }) as never);
  const clock = { at: Date.now() };
  const alerts = new Alerts(store, new Auditor(store, log), { webhookUrl: receiver.url, allowPrivateAccountWebhooks: false, timeoutMs: 1000, currency: 'EUR' }, log, () => new Date(clock.at), () => new Promise((resolve) => setTimeout(resolve, 5)));
  const id = await account(store, 'retried later');
  receiver.answers = [500, 500, 500, 500, 500];
  alerts.crossed('budget', crossing(id, 0.8));
  await eventually(async () => ((await store.listAudit(id, 10)).some((event) => event.action === 'alert.failed') ? true : undefined));
  expect(receiver.bodies).toHaveLength(5);
  alerts.watchExpiries(60_000); // its first look (a sweep first) comes within 5 s: not yet, the lease holds
  clock.at += 10 * 60_000; // ten minutes on: the lease is over
  await eventually(async () => ((await store.listAlerts(id, new Date(0)))[0]?.sentAt ? true : undefined), 10_000);
  await alerts.stop();
  expect(receiver.bodies).toHaveLength(6);
  expect(receiver.bodies.at(-1)).toMatchObject({ event: 'budget.threshold', threshold: 0.8 });
});

test("an account's own webhook gets its alerts instead of the platform's; aimed at a private address it is refused, audited, and the URL told nowhere", async () => {
  const own = await new Receiver().start();
  try {
    // Allowed to be private (a chat server inside): the account's alerts go to its owners' receiver only.
    const inside = setup(receiver.url, new CountingKeyStore(), true);
    const teamId = await account(inside.store, 'team');
    await inside.store.updateAccount(teamId, { alertWebhookUrl: own.url });
    const otherId = await account(inside.store, 'other');
    const alerts = inside.make();
    alerts.crossed('budget', crossing(teamId, 0.8));
    alerts.crossed('budget', crossing(otherId, 0.8));
    await eventually(() => (own.bodies.length === 1 && receiver.bodies.length === 1 ? true : undefined));
    await alerts.stop();
    expect(own.bodies[0]).toMatchObject({ accountId: teamId, _path: SECRET_PATH });
    expect(receiver.bodies[0]).toMatchObject({ accountId: otherId });

    // The default: an account's webhook must be public. Its owners aimed it at this host: refused at once, no connection, no retry.
    const strict = setup(receiver.url);
    const aimedId = await account(strict.store, 'aimed');
    await strict.store.updateAccount(aimedId, { alertWebhookUrl: own.url.replace('127.0.0.1', 'localhost') });
    const guarded = strict.make();
    guarded.crossed('budget', crossing(aimedId, 0.8));
    const failed = await eventually(async () => (await strict.store.listAudit(aimedId, 10)).find((event) => event.action === 'alert.failed'));
    await guarded.stop();
    expect(failed.details).toMatchObject({ delivery: 'failed' });
    expect(own.bodies).toHaveLength(1);
    expect(receiver.bodies).toHaveLength(1);
    const told = strict.lines.join('') + JSON.stringify(await strict.store.listAudit(aimedId, 10));
    expect(told).toContain('its address is not public');
    expect(told).not.toContain(SECRET_PATH);
    expect(told).not.toContain('XXXXsecret');
  } finally {
    await own.stop();
  }
});

test("one account's webhook that never answers holds no other account's expiry alert behind it, rests after failing, and a leak reaches the platform too", async () => {
  const silent = http.createServer(() => undefined);
  const silentUrl = (await listenOnLoopback(silent)) + SECRET_PATH;
  try {
    const { store, make } = setup(receiver.url, new CountingKeyStore(), true);
    const hostileId = await account(store, 'hostile');
    await store.updateAccount(hostileId, { alertWebhookUrl: silentUrl });
    const otherId = await account(store, 'patient');
    // The hostile account's keys expire first: a scan reaches them first.
    for (let i = 0; i < 3; i++) await issueKey(store, { name: `bait-${i}`, accountId: hostileId, expiresAt: new Date(Date.now() + 3_600_000 + i) });
    const honest = await issueKey(store, { name: 'honest', accountId: otherId, expiresAt: new Date(Date.now() + 2 * 86_400_000) });
    const alerts = make();
    alerts.watchExpiries(60_000);
    await eventually(() => (receiver.bodies.some((body) => body.keyId === honest.record.id) ? true : undefined), 8_000);
    // Told while the hostile webhook's tries (five of 1 s) were still under way.
    expect((await store.listAudit(hostileId, 20)).filter((event) => event.action === 'alert.failed')).toEqual([]);
    await eventually(async () => ((await store.listAudit(hostileId, 20)).filter((event) => event.action === 'alert.failed').length === 3 ? true : undefined), 20_000);

    // Resting now: a leak of the hostile account fails there at once, and the platform hears of it.
    let reached = 0;
    silent.on('connection', () => reached++);
    alerts.keyLeaked({ id: 'key_leaked', name: 'leaked', accountId: hostileId }, { reporter: 'github', url: 'https://github.com/x/y' });
    await eventually(() => (receiver.bodies.some((body) => body.event === 'key.leaked') ? true : undefined));
    await alerts.stop();
    expect(reached).toBe(0);
  } finally {
    silent.closeAllConnections();
    silent.close();
  }
}, 40_000);
