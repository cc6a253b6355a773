/**
 * An alert's POST. The platform's webhook (`alerts.webhookUrl`) is the operator's and is posted as
 * configured. An account's own webhook is its owners': they may write any URL, so unless
 * `alerts.allowPrivateAccountWebhooks` says otherwise it must reach a public address. Its host is
 * resolved here, every address it resolves to must be public (not loopback, private, link-local
 * with the cloud metadata address, shared, unique-local, multicast, reserved, or an IPv6 form that
 * embeds one of those), and the connection goes to an address that was checked: a DNS server that
 * answers differently the second time (rebinding) is never asked a second time. A literal address
 * in the URL is checked the same way. Redirects are never followed.
 */
import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP, isIPv4, type LookupFunction } from 'node:net';
import { errors } from '../errors';

const NOT_PUBLIC = new BlockList();
const IPV4_RANGES: ReadonlyArray<[string, number]> = [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12], ['192.0.0.0', 24], ['192.0.2.0', 24],
  ['192.88.99.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24], ['224.0.0.0', 4], ['240.0.0.0', 4],
];
// IPv6: unspecified, loopback, NAT64 and 6to4 and Teredo (they carry an IPv4 address), discard, documentation, unique-local, link-local, multicast.
const IPV6_RANGES: ReadonlyArray<[string, number]> = [
  ['::', 128], ['::1', 128], ['64:ff9b::', 96], ['64:ff9b:1::', 48], ['100::', 64], ['2001::', 23], ['2001:db8::', 32], ['2002::', 16], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8],
];
for (const [net, prefix] of IPV4_RANGES) NOT_PUBLIC.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of IPV6_RANGES) NOT_PUBLIC.addSubnet(net, prefix, 'ipv6');
/** IPv6 outside global unicast (2000::/3) is never public, whatever is yet to be assigned in it. */
const GLOBAL_UNICAST = new BlockList();
GLOBAL_UNICAST.addSubnet('2000::', 3, 'ipv6');

/** Pure: whether an address (IPv4, IPv6, or IPv4 written as IPv6) is on the public internet. */
export function publicAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped) return publicAddress(mapped);
  if (isIPv4(address)) return !NOT_PUBLIC.check(address, 'ipv4');
  if (isIP(address) === 6) {
    // ::ffff:7f00:1 (IPv4-mapped written in hex) and ::7f00:1 (IPv4-compatible): the IPv4 inside decides.
    const embedded = NOT_PUBLIC.check(address, 'ipv6') ? undefined : embeddedIPv4(address);
    return embedded ? publicAddress(embedded) : GLOBAL_UNICAST.check(address, 'ipv6') && !NOT_PUBLIC.check(address, 'ipv6');
  }
  return false;
}

/** The IPv4 address in ::ffff:0:0/96 or ::/96 written in hex, if it is one of those. */
function embeddedIPv4(address: string): string | undefined {
  const groups = expand(address);
  if (!groups || groups.slice(0, 5).some((group) => group !== 0) || (groups[5] !== 0 && groups[5] !== 0xffff)) return undefined;
  return [groups[6]! >> 8, groups[6]! & 255, groups[7]! >> 8, groups[7]! & 255].join('.');
}

function expand(address: string): number[] | undefined {
  const [head = '', tail] = address.split('::');
  const part = (text: string) => (text === '' ? [] : text.split(':').map((group) => parseInt(group, 16)));
  const left = part(head);
  const right = tail === undefined ? [] : part(tail);
  const groups = tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill(0), ...right];
  return groups.length === 8 && groups.every((group) => Number.isInteger(group)) ? groups : undefined;
}

export class AddressNotPublic extends Error {
  constructor() {
    super('its address is not public (loopback, private, link-local or reserved)');
  }
}

/** dns.lookup, answering only when every address of the name is public. */
const publicLookup: LookupFunction = (hostname, options, callback) => {
  dns.lookup(hostname, { all: true, family: options.family }, (err, addresses) => {
    if (err) return (callback as (err: Error) => void)(err);
    if (addresses.length === 0 || addresses.some((entry) => !publicAddress(entry.address))) return (callback as (err: Error) => void)(new AddressNotPublic());
    if (options.all) return (callback as unknown as (err: null, all: dns.LookupAddress[]) => void)(null, addresses);
    callback(null, addresses[0]!.address, addresses[0]!.family);
  });
};

export class DeadlinePassed extends Error {
  constructor(timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms`);
  }
}

/**
 * POSTs JSON; resolves to the answer's status (its body is not read), within `timeoutMs` (a timer
 * of our own, cleared at the end); `stop` cuts it sooner. `publicOnly`: the target must be public,
 * as above.
 */
export function postJson(url: string, body: string, options: { timeoutMs: number; stop?: AbortSignal; publicOnly: boolean }): Promise<number> {
  const target = new URL(url);
  const literal = target.hostname.replace(/^\[|\]$/g, '');
  if (options.publicOnly && isIP(literal) && !publicAddress(literal)) return Promise.reject(new AddressNotPublic());
  const transport = target.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new DeadlinePassed(options.timeoutMs)), options.timeoutMs);
    const stopped = () => controller.abort(new Error('stopped'));
    options.stop?.addEventListener('abort', stopped);
    const settle = (done: () => void) => {
      clearTimeout(timer);
      options.stop?.removeEventListener('abort', stopped);
      done();
    };
    const failed = (err: Error) => settle(() => reject(controller.signal.aborted ? controller.signal.reason : err));
    const request = transport.request(
      target,
      { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }, signal: controller.signal, agent: false, ...(options.publicOnly ? { lookup: publicLookup } : {}) },
      (answer) => {
        // The status is the answer; its body is not read (a hostile webhook could send one without end).
        settle(() => resolve(answer.statusCode ?? 0));
        answer.destroy();
      },
    );
    request.on('error', failed);
    if (options.stop?.aborted) stopped();
    request.end(body);
  });
}

/** The longest webhook URL an account may set. */
const MAX_URL = 2048;

/**
 * An account's `alertWebhookUrl` as its owners send it: an https URL without credentials in it, whose
 * host is a name or a public address (a private one is named by its DNS name, and reached only with
 * `alerts.allowPrivateAccountWebhooks`); null clears it; undefined: not changed. Errors never echo it.
 */
export function alertWebhookUrlField(value: unknown): string | null | undefined {
  if (value === undefined || value === null) return value;
  const problem = (why: string) => errors.invalidBody('alertWebhookUrl', `'alertWebhookUrl' ${why}, or null for none (the platform's webhook).`);
  if (typeof value !== 'string' || value.length > MAX_URL) throw problem(`must be an https:// URL of at most ${MAX_URL} characters`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw problem('must be an https:// URL');
  }
  if (url.href.length > MAX_URL) throw problem(`must be an https:// URL of at most ${MAX_URL} characters`);
  if (url.protocol !== 'https:' || url.hostname === '') throw problem('must be an https:// URL (it carries a secret: never in plain text)');
  if (url.username !== '' || url.password !== '') throw problem('must not hold a user name or password');
  const literal = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(literal) && !publicAddress(literal)) throw problem('must not be a loopback, private, link-local or reserved address');
  return url.href;
}

/** What the APIs show of an account's webhook: its host, never the URL (a secret); null: none. */
export function webhookHost(account: { alertWebhookUrl?: string }): string | null {
  if (!account.alertWebhookUrl) return null;
  try {
    return new URL(account.alertWebhookUrl).host;
  } catch {
    return '(not a URL)'; // put in the store by hand: shown as such, never breaking the page that shows it
  }
}
