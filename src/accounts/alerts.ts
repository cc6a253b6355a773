/**
 * Budget and quota alerts. Each replica's quota trackers tell it when a counter's use reaches a
 * threshold of its limit (`alerts.thresholds`, shares such as 0.5, 0.8, 1; quota-crossings.ts); the
 * store decides which replica sends it: the first to claim the alert's id (one per threshold per
 * period of a key's or an account's quota or budget), a claim unsent past its lease being free to
 * take over. The claimer POSTs it to `alerts.webhookUrl` as JSON (a `text` that reads well in Slack
 * or Teams among the fields), retried with backoff within the lease, each attempt under its own
 * deadline, redirects refused; then marks it sent and audits `alert.sent` (or `alert.failed`). With
 * no webhook the alert is still kept (the console shows the account's) and audited.
 *
 * An account whose owners set a webhook of their own (`alertWebhookUrl`) has its alerts POSTed there
 * instead, to a public address only unless `alerts.allowPrivateAccountWebhooks` (webhook-post.ts).
 * A webhook's URL is a secret (Slack's and Teams' carry their token in it): it is in no log line,
 * audit entry or error.
 */
import type { Config } from '../config';
import type { Logger } from '../telemetry/log';
import type { AccountRecord, AccountStore, AlertRecord, KeyStore } from '../store/types';
import { AddressNotPublic, DeadlinePassed, postJson } from './webhook-post';
import type { Auditor } from './audit';
import type { Crossing } from './quota-scopes';

export interface AlertSettings {
  webhookUrl: string | undefined;
  /** An account's own webhook may be at a loopback or private address. */
  allowPrivateAccountWebhooks: boolean;
  /** Each attempt's deadline. */
  timeoutMs: number;
  /** The price table's currency: what budgets count in. */
  currency: string;
}

/** The alert settings of a config. */
export const alertSettings = (config: Config): AlertSettings => ({
  webhookUrl: config.alerts.webhookUrl,
  allowPrivateAccountWebhooks: config.alerts.allowPrivateAccountWebhooks,
  timeoutMs: config.alerts.timeoutMs,
  currency: config.prices.currency,
});

/** Where an account's alerts go: its own webhook, else the platform's; none: kept and shown only. */
interface Target {
  readonly url: string;
  readonly own: boolean;
  /** An account's own webhook: that account. */
  readonly accountId?: string;
}

/** Deliveries a scan runs at once. */
const SCAN_DELIVERIES = 4;
/** How long an account's own webhook rests after an alert failed every try. */
const OWN_WEBHOOK_REST_MS = 10 * 60_000;

/** Waits before the attempts after the first (ms): five tries within about 15 s. */
const BACKOFF_MS = [1000, 2000, 4000, 8000];
/**
 * How long a claim holds before another replica may take an unsent alert over: longer than every
 * try of a delivery together (five deadlines and the waits between), so that none is sent twice.
 */
const leaseFor = (timeoutMs: number) => Math.max(60_000, 5 * timeoutMs + 15_000 + 10_000);
const NANOS = 1e9;

type Kind = AlertRecord['kind'];
type Store = Pick<AccountStore, 'claimAlert' | 'alertSent' | 'getAccount' | 'listUnsentAlerts'> & Pick<KeyStore, 'get' | 'listExpiring'>;
const WEEK_MS = 7 * 86_400_000;

export class Alerts {
  private settings: AlertSettings;
  private stopped = false;
  private readonly pending = new Set<Promise<void>>();
  /** Aborts the POSTs under way when the process stops. */
  private readonly stopping = new AbortController();
  private scanning = false;
  private scanDeliveries = 0;
  private readonly freed: Array<() => void> = [];
  /** Accounts whose own webhook rests until then (ms). */
  private readonly resting = new Map<string, number>();

  constructor(
    private readonly store: Store,
    private readonly auditor: Auditor,
    settings: AlertSettings,
    private readonly log: Logger,
    private readonly now: () => Date = () => new Date(),
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref()),
  ) {
    this.settings = settings;
  }

  /** A reload's settings: for the alerts crossed from now on. */
  configure(settings: AlertSettings): void {
    this.settings = settings;
  }

  /** A tracker's crossing (tokens or a budget in nano-units): claimed, then sent by whichever replica claims it. */
  crossed(kind: Kind, crossing: Crossing): void {
    if (this.stopped) return;
    this.track(this.handle(kind, crossing), 'could not handle a quota or budget alert');
  }

  private track(work: Promise<void>, failure: string): void {
    const tracked = work.catch((err: unknown) => this.log.warn({ err: (err as Error)?.message ?? String(err) }, failure));
    this.pending.add(tracked);
    void tracked.finally(() => this.pending.delete(tracked));
  }

  /**
   * A leaked key was revoked (leak-reports.ts; by one replica only, the one whose revocation it was):
   * its account's owners are told through the webhook, tried as a threshold's alert is. The console
   * shows it from the audit trail (key.leaked).
   */
  keyLeaked(key: { id: string; name: string; accountId: string }, where: { reporter: string; url?: string }): void {
    if (this.stopped) return;
    this.track(
      (async () => {
        const account = await this.store.getAccount(key.accountId);
        const target = this.targetOf(account);
        if (!target) return;
        const accountName = account?.name ?? key.accountId;
        const found = where.url ? ` in ${plain(where.url)}` : '';
        const text = `Key “${plain(key.name)}” of account “${plain(accountName)}” was found in public${found} (reported by ${where.reporter === 'github' ? "GitHub's secret scanning" : 'a scanner'}) and is revoked: programs using it need a new key.`;
        const payload = { event: 'key.leaked', accountId: key.accountId, accountName, keyId: key.id, keyName: key.name, reporter: where.reporter, ...(where.url ? { url: where.url } : {}), text };
        // The platform is told of a leak too, whatever webhook the account's owners chose.
        const platform = target.own && this.settings.webhookUrl ? [{ url: this.settings.webhookUrl, own: false }] : [];
        await Promise.all([target, ...platform].map((each) => this.deliver(each, payload)));
      })(),
      'could not tell of a leaked key',
    );
  }

  private expiryTimer: NodeJS.Timeout | undefined;

  /**
   * Every `everyMs` (and once soon after the start), the live keys that expire within a week: one
   * `key.expiring` alert each (for that expiry), from the replica that claims it, to the webhook.
   */
  watchExpiries(everyMs: number): void {
    clearInterval(this.expiryTimer);
    const scan = () => {
      if (this.scanning || this.stopped) return; // a scan still under way (a slow webhook): this one is skipped
      this.scanning = true;
      this.track(
        (async () => {
          await this.sweepUnsent();
          await this.scanExpiries();
        })().finally(() => (this.scanning = false)),
        'could not look for alerts to send',
      );
    };
    this.expiryTimer = setInterval(scan, everyMs).unref();
    setTimeout(scan, Math.min(everyMs, 5000)).unref();
  }

  private async scanExpiries(): Promise<void> {
    if (this.stopped) return;
    const now = this.now();
    for (const key of await this.store.listExpiring(now, new Date(now.getTime() + WEEK_MS))) {
      if (this.stopped) return;
      const expiresAt = key.expiresAt!;
      const alert: AlertRecord = { id: `key.expiring:${key.id}:${expiresAt}`, accountId: key.accountId, keyId: key.id, kind: 'key.expiring', period: 'day', periodStart: expiresAt.slice(0, 10), threshold: 1, spent: 0, limit: 0, at: now.toISOString(), sentAt: null };
      if (!(await this.claim(alert))) continue;
      await this.inTurn(async () => {
        const account = await this.store.getAccount(key.accountId);
        const accountName = account?.name ?? key.accountId;
        const text = `Key “${plain(key.name)}” of account “${plain(accountName)}” expires on ${expiresAt.slice(0, 16).replace('T', ' ')} UTC: rotate it, or give it a later expiry, before programs using it stop working.`;
        const target = this.targetOf(account);
        const payload = { event: 'key.expiring', accountId: key.accountId, accountName, keyId: key.id, keyName: key.name, expiresAt, text };
        const delivered = target ? await this.deliver(target, payload) : undefined;
        if (delivered !== false) await this.store.alertSent(alert.id, this.now());
        await this.auditor.record({ accountId: key.accountId, actor: 'chatgate', action: delivered === false ? 'alert.failed' : 'alert.sent', target: key.id, client: undefined, details: { event: 'key.expiring', expiresAt, delivery: delivered === undefined ? 'no webhook' : delivered ? 'webhook' : 'failed' } });
      });
    }
  }

  /**
   * A scan's delivery, run beside the scan (at most SCAN_DELIVERIES at once; the scan waits for a free
   * one), so that one slow webhook does not hold every other account's alerts behind it.
   */
  private async inTurn(delivery: () => Promise<void>): Promise<void> {
    while (this.scanDeliveries >= SCAN_DELIVERIES) await new Promise<void>((resolve) => this.freed.push(resolve));
    this.scanDeliveries++;
    this.track(
      delivery().finally(() => {
        this.scanDeliveries--;
        this.freed.shift()?.();
      }),
      'could not send an alert',
    );
  }

  /**
   * Threshold alerts whose delivery failed (the webhook away longer than the tries, or the process
   * stopped during them) and whose claim's lease has run out: claimed and sent again, while their
   * period lasts. Every replica looks, each expiringCheckMs; the claim keeps each to one sender.
   */
  private async sweepUnsent(): Promise<void> {
    const now = this.now();
    const today = now.toISOString().slice(0, 10);
    for (const alert of await this.store.listUnsentAlerts(now)) {
      if (this.stopped) return;
      if (alert.kind === 'key.expiring' || (alert.periodStart !== today && alert.periodStart !== today.slice(0, 7))) continue;
      const account = await this.store.getAccount(alert.accountId);
      const target = this.targetOf(account);
      if (!target || !(await this.claim({ ...alert, at: alert.at }))) continue;
      await this.inTurn(async () => {
        const key = alert.keyId ? await this.store.get(alert.keyId) : undefined;
        const payload = alertPayload(alert, account?.name ?? alert.accountId, key?.name, this.settings.currency);
        if (await this.deliver(target, payload)) {
          await this.store.alertSent(alert.id, this.now());
          await this.auditor.record({ accountId: alert.accountId, actor: 'chatgate', action: 'alert.sent', target: alert.keyId ?? alert.accountId, client: undefined, details: { threshold: alert.threshold, kind: alert.kind, period: alert.period, periodStart: alert.periodStart, delivery: 'webhook, again' } });
        }
      });
    }
  }

  /** Waits (at most `deadlineMs`) for the alerts under way, then cuts the POSTs still trying; no new ones are taken. */
  async stop(deadlineMs = 2000): Promise<void> {
    this.stopped = true;
    clearInterval(this.expiryTimer);
    setTimeout(() => this.stopping.abort(), deadlineMs).unref();
    await Promise.race([Promise.allSettled([...this.pending]), new Promise((resolve) => setTimeout(resolve, deadlineMs).unref())]);
  }

  private async handle(kind: Kind, crossing: Crossing): Promise<void> {
    const at = this.now();
    const unit = kind === 'budget' ? NANOS : 1;
    const scope = crossing.scope.startsWith('budget:') ? crossing.scope.slice('budget:'.length) : crossing.scope;
    const alert: AlertRecord = {
      id: `${kind}:${scope}:${crossing.threshold}`,
      accountId: crossing.accountId,
      keyId: crossing.keyId ?? null,
      kind,
      period: crossing.period,
      periodStart: crossing.periodStart,
      threshold: crossing.threshold,
      spent: crossing.used / unit,
      limit: crossing.limit / unit,
      at: at.toISOString(),
      sentAt: null,
    };
    if (!(await this.claim(alert))) return; // sent, or another replica's to send
    const account = await this.store.getAccount(alert.accountId);
    const key = alert.keyId ? await this.store.get(alert.keyId) : undefined;
    const payload = alertPayload(alert, account?.name ?? alert.accountId, key?.name, this.settings.currency);
    const target = this.targetOf(account);
    const delivered = target ? await this.deliver(target, payload) : undefined;
    if (delivered !== false) await this.store.alertSent(alert.id, this.now());
    const details = { threshold: alert.threshold, kind, period: alert.period, periodStart: alert.periodStart, spent: payload.spent, limit: payload.budget, delivery: delivered === undefined ? 'no webhook' : delivered ? 'webhook' : 'failed' };
    await this.auditor.record({ accountId: alert.accountId, actor: 'chatgate', action: delivered === false ? 'alert.failed' : 'alert.sent', target: alert.keyId ?? alert.accountId, client: undefined, details });
  }

  /** The claim, tried again (with backoff) while the store does not answer. */
  private async claim(alert: AlertRecord): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.store.claimAlert(alert, leaseFor(this.settings.timeoutMs), this.now());
      } catch (err) {
        if (attempt >= BACKOFF_MS.length || this.stopped) throw err;
        await this.sleep(BACKOFF_MS[attempt]!);
      }
    }
  }

  private targetOf(account: AccountRecord | undefined): Target | undefined {
    if (account?.alertWebhookUrl) return { url: account.alertWebhookUrl, own: true, accountId: account.id };
    return this.settings.webhookUrl ? { url: this.settings.webhookUrl, own: false } : undefined;
  }

  /** POSTs the alert; true on a 2xx, false once every attempt failed (at once for an address not public). Never logs the URL. */
  private async deliver(target: Target, payload: object & { event: string; threshold?: number; accountId?: string }): Promise<boolean> {
    // An account's own webhook whose last alert failed every try rests: its alerts fail at once meanwhile (audited), not after every try again.
    if (target.accountId && (this.resting.get(target.accountId) ?? 0) > this.now().getTime()) return false;
    const delivered = await this.post(target, payload);
    if (target.accountId && !delivered) this.resting.set(target.accountId, this.now().getTime() + OWN_WEBHOOK_REST_MS);
    else if (target.accountId) this.resting.delete(target.accountId);
    return delivered;
  }

  private async post(target: Target, payload: object & { event: string; threshold?: number; accountId?: string }): Promise<boolean> {
    const body = JSON.stringify(payload);
    const publicOnly = target.own && !this.settings.allowPrivateAccountWebhooks;
    for (let attempt = 0; ; attempt++) {
      let problem: string;
      let final = false;
      try {
        const status = await postJson(target.url, body, { timeoutMs: this.settings.timeoutMs, stop: this.stopping.signal, publicOnly });
        if (status >= 200 && status < 300) return true;
        problem = `answered ${status}`;
      } catch (err) {
        final = err instanceof AddressNotPublic;
        problem = final || err instanceof DeadlinePassed ? (err as Error).message : 'could not be reached';
      }
      if (final || attempt >= BACKOFF_MS.length || this.stopped) {
        const whose = target.own ? `account ${payload.accountId ?? ''}'s own alert webhook` : 'alert webhook';
        this.log.warn({ alert: payload.event, threshold: payload.threshold, attempts: attempt + 1 }, `the ${whose} ${problem}: the alert was not delivered`);
        return false;
      }
      await this.sleep(BACKOFF_MS[attempt]!);
    }
  }
}

export interface AlertPayload {
  event: 'budget.threshold' | 'quota.threshold';
  accountId: string;
  accountName: string;
  keyId?: string;
  keyName?: string;
  threshold: number;
  period: 'day' | 'month';
  periodStart: string;
  spent: number;
  budget: number;
  currency: string;
  text: string;
}

/** Pure: what is POSTed. `budget` is the limit (tokens for a quota, whose `currency` is `tokens`). */
export function alertPayload(alert: AlertRecord, accountName: string, keyName: string | undefined, currency: string): AlertPayload {
  const money = alert.kind === 'budget';
  const unit = money ? currency : 'tokens';
  const amount = (n: number) => (money ? n.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 }) : Math.round(n).toLocaleString('en-US'));
  const whose = keyName !== undefined ? `Key “${plain(keyName)}” of account “${plain(accountName)}”` : `Account “${plain(accountName)}”`;
  const what = `${alert.period === 'day' ? 'daily' : 'monthly'} ${money ? 'budget' : 'token quota'}`;
  const text = `${whose} has used ${Math.round(alert.threshold * 100)}% of its ${what}: ${amount(alert.spent)} of ${amount(alert.limit)} ${unit} (${alert.periodStart}, UTC).`;
  return {
    event: money ? 'budget.threshold' : 'quota.threshold',
    accountId: alert.accountId,
    accountName,
    ...(alert.keyId ? { keyId: alert.keyId, ...(keyName !== undefined ? { keyName } : {}) } : {}),
    threshold: alert.threshold,
    period: alert.period,
    periodStart: alert.periodStart,
    spent: money ? Math.round(alert.spent * 100) / 100 : Math.round(alert.spent),
    budget: alert.limit,
    currency: unit,
    text,
  };
}

/**
 * Text for a chat webhook, whose `text` Slack and Teams read as markup: names and URLs (chosen by
 * whoever made the key or the account) have their `&`, `<` and `>` escaped, so that none can ping a
 * channel (`<!channel>`) or dress a link up (`<https://evil|https://chatgate>`). The raw values stay
 * in their own fields.
 */
export function plain(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
