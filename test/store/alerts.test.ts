/**
 * Alert claims in both SQL stores and the memory and file fakes (contract-backends.ts), through two
 * handles (two replicas): of many claims at once exactly one wins; a sent alert is never claimed again; an unsent one is free again
 * once its claim's lease ran out; an account lists its own alerts only, newest first; alerts older
 * than ALERTS_KEPT_DAYS go as claims come.
 */
import { ALERTS_KEPT_DAYS, type AlertRecord } from '../../src/store/types';
import { CONTRACT_BACKENDS, type ContractBackend } from './contract-backends';
import { notCalled } from './contract-methods';

const alert = (id: string, accountId = 'acc_1', at = '2026-11-29T10:00:00.000Z'): AlertRecord => ({
  id,
  accountId,
  keyId: null,
  kind: 'budget',
  period: 'day',
  periodStart: at.slice(0, 10),
  threshold: 0.8,
  spent: 40.5,
  limit: 50,
  at,
  sentAt: null,
});

describe.each(CONTRACT_BACKENDS)('%s', (_kind, open) => {
  let pair: ContractBackend;
  beforeAll(async () => {
    pair = await open();
  });
  afterAll(() => pair?.close());

  test('of twenty claims at once through two handles, exactly one wins', async () => {
    const now = new Date('2026-11-29T10:00:01Z');
    const claims = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? pair.other : pair.store).claimAlert(alert('budget:account:acc_1:d:2026-11-29:0.8'), 60_000, now)));
    expect(claims.filter(Boolean)).toHaveLength(1);
  });

  test('a claim whose lease ran out is free again while unsent; a sent alert never is', async () => {
    const start = new Date('2026-11-29T11:00:00Z');
    const later = (ms: number) => new Date(start.getTime() + ms);
    const id = 'tokens:key:key_9:d:2026-11-29:0.5';
    expect(await pair.store.claimAlert(alert(id), 60_000, start)).toBe(true);
    expect(await pair.other.claimAlert(alert(id), 60_000, later(59_000))).toBe(false); // the lease holds
    expect(await pair.other.claimAlert(alert(id), 60_000, later(61_000))).toBe(true); // taken over
    await pair.other.alertSent(id, later(62_000));
    expect(await pair.store.claimAlert(alert(id), 60_000, later(10 * 60_000))).toBe(false); // sent: never again
  });

  test('an account lists its own alerts, newest first, with what was sent', async () => {
    await pair.store.claimAlert(alert('tokens:account:acc_2:m:2026-11:0.5', 'acc_2', '2026-11-29T09:00:00.000Z'), 60_000, new Date());
    await pair.store.claimAlert(alert('tokens:account:acc_2:m:2026-11:1', 'acc_2', '2026-11-29T12:00:00.000Z'), 60_000, new Date());
    await pair.store.claimAlert(alert('tokens:account:acc_3:m:2026-11:1', 'acc_3', '2026-11-29T12:00:00.000Z'), 60_000, new Date());
    await pair.other.alertSent('tokens:account:acc_2:m:2026-11:1', new Date('2026-11-29T12:00:01Z'));
    const listed = await pair.other.listAlerts('acc_2', new Date('2026-11-01T00:00:00Z'));
    expect(listed.map((a) => [a.id, a.sentAt])).toEqual([
      ['tokens:account:acc_2:m:2026-11:1', '2026-11-29T12:00:01.000Z'],
      ['tokens:account:acc_2:m:2026-11:0.5', null],
    ]);
    expect(listed[0]).toMatchObject({ accountId: 'acc_2', keyId: null, kind: 'budget', period: 'day', threshold: 0.8, spent: 40.5, limit: 50, at: '2026-11-29T12:00:00.000Z' });
    expect(await pair.store.listAlerts('acc_2', new Date('2026-11-29T10:00:00Z'))).toHaveLength(1);
  });

  test(`alerts older than ${ALERTS_KEPT_DAYS} days go as claims come; younger ones stay`, async () => {
    const day = 86_400_000;
    const t0 = Date.parse('2027-03-01T00:00:00Z');
    const claimAt = (id: string, days: number) => pair.store.claimAlert(alert(id, 'acc_4', new Date(t0 + days * day).toISOString()), 60_000, new Date(t0 + days * day));
    const ids = async () => (await pair.other.listAlerts('acc_4', new Date(0))).map((a) => a.id);
    await claimAt('old', 0);
    await claimAt('young', ALERTS_KEPT_DAYS - 10); // the old one is still within the days kept
    expect(await ids()).toEqual(['young', 'old']);
    await claimAt('new', ALERTS_KEPT_DAYS + 10);
    expect(await ids()).toEqual(['new', 'young']);
    expect(await pair.other.listAlerts('acc_2', new Date(0))).toEqual([]); // November's went too
  });

  test('listUnsentAlerts: those not sent whose lease ended before `now`, the oldest first (then by id), at most 100', async () => {
    const t = Date.parse('2027-06-01T00:00:00Z');
    // 104 alerts made in an order that is not their time's; one with a long lease, one sent.
    const made = Array.from({ length: 104 }, (_, i) => alert(`unsent:${String(i).padStart(3, '0')}`, 'acc_5', new Date(t + ((i * 37) % 104) * 1000).toISOString()));
    for (const [i, each] of made.entries()) expect(await (i % 2 ? pair.other : pair.store).claimAlert(each, i === 5 ? 3_600_000 : 1000, new Date(t + 200_000))).toBe(true);
    await pair.other.alertSent(made[7]!.id, new Date(t + 200_100));
    const mine = (alerts: AlertRecord[]) => alerts.filter((a) => a.accountId === 'acc_5');
    expect(mine(await pair.store.listUnsentAlerts(new Date(t + 200_500)))).toEqual([]); // every lease holds
    const listed = await pair.store.listUnsentAlerts(new Date(t + 201_001));
    expect(listed).toHaveLength(100);
    expect(listed.every((a) => a.sentAt === null)).toBe(true);
    const byTime = (a: AlertRecord, b: AlertRecord) => (a.at < b.at ? -1 : a.at > b.at ? 1 : a.id < b.id ? -1 : 1);
    expect(listed).toEqual([...listed].sort(byTime));
    const due = made.filter((_, i) => i !== 5 && i !== 7).sort(byTime);
    expect(mine(listed)).toEqual(due.slice(0, mine(listed).length));
    expect(mine(listed).length).toBeGreaterThan(90);
  });

  test('every method this file answers for was called on this backend', () => {
    expect(notCalled('alerts', pair.called)).toEqual([]);
  });
});
