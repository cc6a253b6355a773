/**
 * Pure: the Authorization header -> the key it carries, or why it carries none.
 * `Bearer <key>` and `Basic base64(<key>:)` mean the same thing; scheme names are case-insensitive
 * (RFC 9110). The key must be an RFC 6750 b64token in both schemes, so that the two always agree.
 * Reasons never quote the header: it may hold a key.
 */
import { decodeUtf8Strict } from '../common/text';

export type Credentials =
  | { ok: true; key: string; scheme: 'bearer' | 'basic' }
  | { ok: false; problem: 'missing' }
  | { ok: false; problem: 'malformed'; reason: string };

const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export function parseAuthorization(header: string | undefined): Credentials {
  const value = header?.trim() ?? '';
  if (value === '') return { ok: false, problem: 'missing' };

  const space = value.search(/[ \t]/);
  const scheme = (space === -1 ? value : value.slice(0, space)).toLowerCase();
  const rest = space === -1 ? '' : value.slice(space).trim();

  if (scheme === 'bearer') return keyFrom(rest, 'bearer');
  if (scheme === 'basic') return parseBasic(rest);
  return malformed("the scheme must be 'Bearer' or 'Basic'");
}

function parseBasic(encoded: string): Credentials {
  if (encoded === '') return malformed('Basic credentials are empty');
  if (!BASE64.test(encoded)) return malformed('Basic credentials are not valid base64');
  const decoded = decodeUtf8Strict(Buffer.from(encoded, 'base64'));
  if (decoded === undefined) return malformed('Basic credentials are not valid UTF-8');
  const colon = decoded.indexOf(':');
  if (colon === -1) return malformed("Basic credentials must be '<key>:' (the key as user name, an empty password)");
  if (colon !== decoded.length - 1) return malformed('the Basic password must be empty; send the key as the user name');
  return keyFrom(decoded.slice(0, colon), 'basic');
}

function keyFrom(candidate: string, scheme: 'bearer' | 'basic'): Credentials {
  if (candidate === '') return malformed('the API key is empty');
  if (!B64TOKEN.test(candidate)) return malformed('the API key holds characters an API key cannot have');
  return { ok: true, key: candidate, scheme };
}

function malformed(reason: string): Credentials {
  return { ok: false, problem: 'malformed', reason };
}
