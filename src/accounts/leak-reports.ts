/**
 * Leak reports that revoke. GitHub's secret scanning finds chatgate keys in public code and sends
 * them to `POST /secret-scanning/github` as `[{token, type, url, source}]`, signed with ECDSA P-256
 * over the raw body (`Github-Public-Key-Signature`, base64 of the DER signature) by the key that
 * `Github-Public-Key-Identifier` names among `secretScanning.github.publicKeys` or those GitHub
 * publishes at `secretScanning.github.keysUrl` (github-keys.ts). A report not signed by one of them
 * is refused 401 and changes nothing. Each reported string that is a live chatgate
 * key is revoked at once (the store's change feed takes it off every replica) and audited
 * (`key.leaked`, with where it was found); the answer is GitHub's feedback format, one entry a
 * token: `true_positive` for a key this gateway made (live or not), else `false_positive` (a
 * look-alike whose checksum fails never reaches the store). Admins send other scanners' findings
 * to `POST /admin/api/keys/leaked` as a list of strings.
 */
import { verify, type KeyObject } from 'node:crypto';
import express, { type Request, type RequestHandler, type Response } from 'express';
import { digestKey } from '../auth/keys';
import { keyForm } from '../common/key-shape';
import { errors } from '../errors';
import type { Store } from '../store/types';
import type { Auditor } from './audit';
import type { GithubSigningKeys } from './github-keys';

/** Where GitHub sends its reports, on the public (HTTPS) listener. */
export const GITHUB_LEAK_REPORTS_PATH = '/secret-scanning/github';
/** A report larger than this is not one (GitHub sends a few matches at a time). */
const MAX_REPORT_BYTES = 256 * 1024;
/** A DER ECDSA P-256 signature is at most 72 bytes: 96 base64 characters; more is not one. */
const MAX_SIGNATURE_CHARS = 128;
const MAX_TOKENS = 1000;

export type LeakLabel = 'true_positive' | 'false_positive';

export interface LeakSource {
  /** Who reported it: `github`, or the admin API. */
  reporter: 'github' | 'admin-token';
  url?: string;
  source?: string;
}

/** What one reported string turned out to be: a key of ours (and which), or not. */
export interface LeakVerdict {
  label: LeakLabel;
  keyId?: string;
  /** Revoked by this report (false: it was revoked before, or it is not a key). */
  revoked: boolean;
}

export class LeakReports {
  /** Told of each key a report revoked (once, by the replica whose revocation it was): the owners are (alerts.ts). */
  onRevoked: ((key: { id: string; name: string; accountId: string }, where: LeakSource) => void) | undefined;

  constructor(
    private readonly store: Pick<Store, 'findByDigest' | 'revoke'>,
    private readonly auditor: Auditor,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Each string: a key of ours is revoked (once) and audited; anything else is a false positive, at no store lookup when it cannot be a key. */
  async report(token: string, where: LeakSource, client: string | undefined): Promise<LeakVerdict> {
    const form = keyForm(token);
    if (form !== 'checksummed' && form !== 'legacy') return { label: 'false_positive', revoked: false };
    const found = await this.store.findByDigest(digestKey(token));
    const at = this.now();
    // A secret a rotation replaced works only while its grace lasts: after it, it is no key of ours;
    // during it, it is live, and the key is revoked as for its current secret.
    if (!found || (found.previousKey && !(found.previousKeyExpiresAt && Date.parse(found.previousKeyExpiresAt) > at.getTime()))) return { label: 'false_positive', revoked: false };
    if (found.revokedAt !== null) return { label: 'true_positive', keyId: found.id, revoked: false };
    const revoked = await this.store.revoke(found.id, at);
    // A store keeps the first revocation's time: another time means another call revoked it first
    // (two reports at once), and that one audits it.
    if (!revoked || revoked.revokedAt === null || Date.parse(revoked.revokedAt) !== at.getTime()) return { label: 'true_positive', keyId: found.id, revoked: false };
    const details: Record<string, string> = { reporter: where.reporter };
    if (where.url) details.url = where.url.slice(0, 2048);
    if (where.source) details.source = where.source.slice(0, 100);
    await this.auditor.record({ accountId: found.accountId, actor: where.reporter === 'github' ? 'github-secret-scanning' : 'admin-token', action: 'key.leaked', target: found.id, client, details });
    this.onRevoked?.({ id: found.id, name: found.name, accountId: found.accountId }, where);
    return { label: 'true_positive', keyId: found.id, revoked: true };
  }
}

/** Pure: whether `body` carries a valid signature by the key its identifier names. */
export function signedBy(keys: { get(identifier: string): KeyObject | undefined }, identifier: unknown, signature: unknown, body: Buffer): boolean {
  if (typeof identifier !== 'string' || typeof signature !== 'string' || signature.length > MAX_SIGNATURE_CHARS) return false;
  const key = keys.get(identifier);
  if (!key) return false;
  const der = Buffer.from(signature, 'base64');
  if (der.length === 0) return false;
  try {
    return verify('sha256', body, key, der);
  } catch {
    return false; // not a DER signature
  }
}

/**
 * `POST /secret-scanning/github`: a request whose headers cannot be a signature by a trusted key is
 * refused before its body is read (an identifier not known yet is looked up in GitHub's published
 * keys first, github-keys.ts); the body (never inflated: GitHub does not compress, and a small
 * compressed body could cost a large one) is verified before it is parsed.
 */
export function githubLeakReports(reports: LeakReports, keys: GithubSigningKeys): RequestHandler[] {
  const plausible: RequestHandler = (req, _res, next) => {
    const identifier = req.headers['github-public-key-identifier'];
    const signature = req.headers['github-public-key-signature'];
    if (typeof identifier !== 'string' || identifier.length === 0 || typeof signature !== 'string' || signature.length === 0 || signature.length > MAX_SIGNATURE_CHARS) throw errors.invalidSignature();
    keys.resolve(identifier).then((key) => next(key ? undefined : errors.invalidSignature()), next);
  };
  const raw = express.raw({ type: () => true, limit: MAX_REPORT_BYTES, inflate: false });
  const handle = async (req: Request, res: Response) => {
    const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    if (!signedBy(keys, req.headers['github-public-key-identifier'], req.headers['github-public-key-signature'], body)) throw errors.invalidSignature();
    const matches = parseReport(body);
    const answer = [];
    for (const match of matches) {
      const verdict = await reports.report(match.token, { reporter: 'github', url: match.url, source: match.source }, req.ip);
      answer.push({ token_raw: match.token, token_type: match.type, label: verdict.label });
    }
    res.json(answer);
  };
  return [plausible, raw, (req, res, next) => void handle(req, res).catch(next)];
}

/**
 * Pure: GitHub's report, `[{token, type, url?, source?}]`, or 400 naming what is wrong. Fields GitHub
 * may add later are let by (refusing them would stop revocations the day it adds one); the ones read
 * must have their types.
 */
export function parseReport(body: Buffer): Array<{ token: string; type: string; url?: string; source?: string }> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw errors.invalidJson('the report is not JSON');
  }
  if (!Array.isArray(parsed)) throw errors.invalidBody(null, 'A report is a JSON array of matches.');
  if (parsed.length > MAX_TOKENS) throw errors.invalidBody(null, `A report holds at most ${MAX_TOKENS} matches.`);
  return parsed.map((match: unknown, i) => {
    const m = match as Record<string, unknown>;
    if (typeof match !== 'object' || match === null || Array.isArray(match)) throw errors.invalidBody(`[${i}]`, `Match ${i} is not an object.`);
    if (typeof m.token !== 'string' || m.token.length === 0 || m.token.length > 1000) throw errors.invalidBody(`[${i}].token`, `Match ${i} has no token string.`);
    // Past the token, a field of an unexpected type is left out rather than refusing the report: the
    // report's other keys must not stay live over a field GitHub changed.
    const text = (value: unknown) => (typeof value === 'string' ? value : undefined);
    return { token: m.token, type: text(m.type) ?? '', url: text(m.url), source: text(m.source) };
  });
}
