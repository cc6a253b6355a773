/**
 * The keys GitHub's secret scanning signs its reports with: those the config lists
 * (`secretScanning.github.publicKeys`) and, with `secretScanning.github.keysUrl`, those GitHub
 * publishes there (`{"public_keys": [{"key_identifier", "key", "is_current"}]}`, at
 * https://api.github.com/meta/public_keys/secret_scanning). The published list is fetched at start,
 * every REFRESH_MS, and when a report names an identifier not known yet: GitHub rotates its keys and
 * may sign with a new one before the next refresh. Such a fetch happens at most once every
 * REFETCH_MIN_MS, whatever the reports say, so that made-up identifiers cannot make the gateway
 * fetch in a loop; a report with an identifier still unknown after it is refused (401).
 *
 * A fetch has a deadline of FETCH_TIMEOUT_MS measured here, reads at most MAX_LIST_BYTES, and takes
 * only P-256 public keys; a failed one keeps the keys fetched before, and is reported once until a
 * fetch succeeds again.
 */
import { createPublicKey, type KeyObject } from 'node:crypto';
import { fetchBoundedText } from '../common/bounded-fetch';

const REFRESH_MS = 3_600_000;
const REFETCH_MIN_MS = 60_000;
const FETCH_TIMEOUT_MS = 5_000;
const MAX_LIST_BYTES = 256 * 1024;
const MAX_IDENTIFIER = 200;

export interface GithubKeysEvents {
  /** A fetch of the published keys failed (the keys known before stay); once until one succeeds. */
  failed(err: unknown): void;
  /** A fetch succeeded after one failed, or for the first time: how many keys it holds. */
  fetched(count: number): void;
}

/** The public keys a report may be signed with, by identifier; refused when one is not a P-256 public key. */
export function githubKeys(publicKeys: ReadonlyArray<{ identifier: string; key: string }>): ReadonlyMap<string, KeyObject> {
  return new Map(publicKeys.map(({ identifier, key }) => [identifier, p256PublicKey(key)]));
}

export class GithubSigningKeys {
  private configured: ReadonlyMap<string, KeyObject> = new Map();
  private published: ReadonlyMap<string, KeyObject> = new Map();
  private url: string | undefined;
  private lastAskedAt = -Infinity;
  private fetching: Promise<void> | undefined;
  private failing: boolean | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly events: GithubKeysEvents) {}

  /** What the (re)loaded config says: its keys, and where GitHub's are published (a new address is fetched at once). */
  configure(configured: ReadonlyMap<string, KeyObject>, url: string | undefined): void {
    this.configured = configured;
    if (url === this.url) return;
    this.url = url;
    this.published = new Map();
    this.lastAskedAt = -Infinity;
    clearInterval(this.timer);
    this.timer = undefined;
    if (!url) return;
    void this.refresh();
    this.timer = setInterval(() => void this.refresh(), REFRESH_MS);
    this.timer.unref();
  }

  /** Whether reports can be verified at all (a key configured, or an address to fetch them from). */
  get enabled(): boolean {
    return this.configured.size > 0 || this.url !== undefined;
  }

  /** The key an identifier names, as known now (no I/O). */
  get(identifier: string): KeyObject | undefined {
    return this.configured.get(identifier) ?? this.published.get(identifier);
  }

  /** The key an identifier names; unknown, the published list is fetched again first when it may be. */
  async resolve(identifier: string): Promise<KeyObject | undefined> {
    const known = this.get(identifier);
    if (known || !this.url || identifier.length > MAX_IDENTIFIER) return known;
    if (this.fetching) await this.fetching;
    else if (Date.now() - this.lastAskedAt >= REFETCH_MIN_MS) {
      this.lastAskedAt = Date.now();
      await this.refresh();
    }
    return this.get(identifier);
  }

  /** Fetches the published list (one fetch at a time); what it holds replaces the list fetched before. */
  refresh(): Promise<void> {
    const url = this.url;
    if (!url) return Promise.resolve();
    this.fetching ??= (async () => {
      try {
        const keys = await fetchPublished(url);
        if (url !== this.url) return; // the config changed meanwhile
        this.published = keys;
        if (this.failing !== false) this.events.fetched(keys.size);
        this.failing = false;
      } catch (err) {
        if (this.failing !== true) this.events.failed(err);
        this.failing = true;
      } finally {
        this.fetching = undefined;
      }
    })();
    return this.fetching;
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}

async function fetchPublished(url: string): Promise<ReadonlyMap<string, KeyObject>> {
  return parsePublished(await fetchBoundedText(url, MAX_LIST_BYTES, FETCH_TIMEOUT_MS), url);
}

/** Pure: GitHub's published list as keys by identifier; an entry that is not a P-256 public key is left out. */
export function parsePublished(text: string, url = 'the list'): ReadonlyMap<string, KeyObject> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error(`${url} is not JSON`);
  }
  const list = (parsed as { public_keys?: unknown } | null)?.public_keys;
  if (!Array.isArray(list)) throw new Error(`${url} holds no public_keys list`);
  const keys = new Map<string, KeyObject>();
  for (const entry of list.slice(0, 100) as Array<{ key_identifier?: unknown; key?: unknown }>) {
    if (typeof entry?.key_identifier !== 'string' || entry.key_identifier.length === 0 || entry.key_identifier.length > MAX_IDENTIFIER || typeof entry.key !== 'string') continue;
    try {
      keys.set(entry.key_identifier, p256PublicKey(entry.key));
    } catch {
      // not a key GitHub would sign with: left out
    }
  }
  return keys;
}

function p256PublicKey(pem: string): KeyObject {
  if (!pem.trimStart().startsWith('-----BEGIN PUBLIC KEY-----')) throw new Error('not a PEM public key');
  const key = createPublicKey(pem);
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1') throw new Error('not a P-256 key');
  return key;
}
