/**
 * A JWT issuer for workload identity tests, as Kubernetes, GitHub Actions or a cloud publish theirs:
 * an HTTPS server on 127.0.0.1 serving an OpenID Connect discovery document and a JWKS, and tokens
 * it signs. Signing is node:crypto's own (RS256, ES256), not the gateway's library, so the two check
 * each other. It counts the fetches of each path, rotates its key on demand, and can stop answering.
 */
import { createHmac, createPublicKey, generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Certificate } from '../../src/process/dev-certificate';

export interface SigningKey {
  kid: string;
  alg: 'RS256' | 'ES256';
  privateKey: KeyObject;
  publicJwk: Record<string, unknown>;
}

export function signingKey(alg: 'RS256' | 'ES256' = 'RS256', kid: string = randomUUID(), modulusLength = 2048): SigningKey {
  const pair = alg === 'RS256' ? generateKeyPairSync('rsa', { modulusLength }) : generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { kid, alg, privateKey: pair.privateKey, publicJwk: { ...pair.publicKey.export({ format: 'jwk' }), kid, alg, use: 'sig' } };
}

const b64url = (value: Buffer | string) => Buffer.from(value).toString('base64url');

/** A compact JWS of these claims, with this header, signed by the key (or, with `hmacSecret`, HS256 over it). */
export function signJwt(claims: Record<string, unknown>, key: SigningKey, header: Record<string, unknown> = {}, hmacSecret?: Buffer): string {
  const head = { alg: hmacSecret ? 'HS256' : key.alg, typ: 'JWT', kid: key.kid, ...header };
  const input = `${b64url(JSON.stringify(head))}.${b64url(JSON.stringify(claims))}`;
  if (head.alg === 'none') return `${input}.`;
  const signature = hmacSecret
    ? createHmac('sha256', hmacSecret).update(input).digest()
    : sign('sha256', Buffer.from(input), key.alg === 'ES256' ? { key: key.privateKey, dsaEncoding: 'ieee-p1363' } : key.privateKey);
  return `${input}.${b64url(signature)}`;
}

export interface JwtIssuer {
  issuer: string;
  /** The keys the JWKS serves now; the first signs. */
  keys: SigningKey[];
  fetches: { discovery: number; jwks: number };
  /** A token of this issuer, signed by its current key, valid for an hour unless the claims say otherwise. */
  token(claims: Record<string, unknown>, header?: Record<string, unknown>): string;
  /** A new signing key; the JWKS serves it alone (`keepOld`: the old one too, after it). */
  rotate(keepOld?: boolean): SigningKey;
  /** Serves this key too (after the signing one), e.g. one too weak to trust. */
  publish(key: SigningKey): void;
  /** While true, requests are accepted and never answered. */
  hang: boolean;
  /** When set, the discovery document names this issuer instead of its own (a misconfigured or impostor issuer). */
  discoveryIssuer: string | undefined;
  /** When set, the JWKS answer is this text instead of the keys. */
  jwksBody: string | undefined;
  close(): Promise<void>;
}

export async function startJwtIssuer(tls: Certificate): Promise<JwtIssuer> {
  const fetches = { discovery: 0, jwks: 0 };
  const state: { keys: SigningKey[]; hang: boolean; discoveryIssuer?: string; jwksBody?: string } = { keys: [signingKey()], hang: false };
  const server = https.createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    if (state.hang) return; // the socket stays open, no answer
    const send = (body: unknown) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (req.url === '/.well-known/openid-configuration') {
      fetches.discovery++;
      return send({ issuer: state.discoveryIssuer ?? issuer, jwks_uri: `${issuer}/keys`, id_token_signing_alg_values_supported: ['RS256', 'ES256'], response_types_supported: ['id_token'], subject_types_supported: ['public'] });
    }
    if (req.url === '/keys') {
      fetches.jwks++;
      if (state.jwksBody !== undefined) return res.writeHead(200, { 'content-type': 'application/json' }).end(state.jwksBody);
      return send({ keys: state.keys.map((key) => key.publicJwk) });
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const now = () => Math.floor(Date.now() / 1000);
  return {
    issuer,
    get keys() {
      return state.keys;
    },
    fetches,
    get hang() {
      return state.hang;
    },
    set hang(value: boolean) {
      state.hang = value;
    },
    get discoveryIssuer() {
      return state.discoveryIssuer;
    },
    set discoveryIssuer(value: string | undefined) {
      state.discoveryIssuer = value;
    },
    get jwksBody() {
      return state.jwksBody;
    },
    set jwksBody(value: string | undefined) {
      state.jwksBody = value;
    },
    token: (claims, header) => signJwt({ iss: issuer, iat: now(), nbf: now(), exp: now() + 3600, ...claims }, state.keys[0]!, header),
    publish(key) {
      state.keys = [...state.keys, key];
    },
    rotate(keepOld = false) {
      const next = signingKey();
      state.keys = keepOld ? [next, ...state.keys] : [next];
      return next;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The public key's PEM bytes: what an algorithm-confusion attack uses as an HMAC secret. */
export function publicPem(key: SigningKey): Buffer {
  return Buffer.from(createPublicKey(key.privateKey).export({ format: 'pem', type: 'spki' }));
}
