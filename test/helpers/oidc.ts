/**
 * Driving console sign-in through a real OpenID Provider: test/helpers/oidc-provider.mjs as a process
 * (listening at once, configured by command), and a browser made of plain HTTPS requests with a
 * cookie jar per site (the gateway's, the provider's). The provider's sign-in step is one request
 * (GET /interaction/<uid>?login=<name>); the rest is the provider's own authorization endpoint,
 * redirects, cookies and token endpoint.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { loadOrCreateDevCertificate } from '../../src/process/dev-certificate';
import { startGatewayProcess, type GatewayProcess } from './gateway-process';
import { request, type RawResponse } from './http';
import { stopProcess } from './processes';
import { eventually } from './time';

const PROVIDER_SCRIPT = path.join(__dirname, 'oidc-provider.mjs');

export interface ProviderProcess {
  child: ChildProcess;
  port: number;
  issuer: string;
  ca: string;
  events: Array<Record<string, unknown>>;
  send(command: Record<string, unknown>): Promise<Record<string, unknown>>;
  stderr(): string;
}

/** The console's session cookie, whichever of its names this build sets. */
export const SESSION_COOKIE_NAME = /^(?:__Host-)?chatgate_session=/;

/** test/helpers/oidc-provider.mjs as a process: listening at once, configured by command. */
export function startProvider(certFile: string, keyFile: string, ca: string): Promise<ProviderProcess> {
  const child = spawn(process.execPath, [PROVIDER_SCRIPT, certFile, keyFile], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const events: Array<Record<string, unknown>> = [];
  const waiting = new Map<number, (answer: Record<string, unknown>) => void>();
  let nextId = 1;
  return new Promise((resolve, reject) => {
    child.once('exit', (code, signal) => reject(new Error(`the OpenID Provider exited with ${code ?? signal}: ${stderr}`)));
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const message = JSON.parse(line) as Record<string, unknown>;
      if (typeof message.id === 'number') {
        waiting.get(message.id)?.(message);
        waiting.delete(message.id);
      } else events.push(message);
      if (message.event === 'listening') {
        const port = message.port as number;
        resolve({
          child,
          port,
          issuer: `https://127.0.0.1:${port}`,
          ca,
          events,
          stderr: () => stderr,
          send: (command) =>
            new Promise((answered, failed) => {
              const id = nextId++;
              waiting.set(id, (answer) => (answer.ok ? answered(answer) : failed(new Error(String(answer.error)))));
              child.stdin!.write(`${JSON.stringify({ id, ...command })}\n`);
            }),
        });
      }
    });
  });
}

/** Ends the provider: its stdin closing tells it the test is done. */
export async function stopProvider(provider: ProviderProcess | undefined): Promise<void> {
  if (!provider) return;
  provider.child.stdin!.end();
  await stopProcess(provider.child);
}

/** A browser: a cookie jar per site (the gateway's, the provider's). */
export class Browser {
  readonly jars = new Map<string, Map<string, string>>();

  constructor(
    readonly sites: { provider: ProviderProcess; gw: GatewayProcess },
    copyOf?: Browser,
  ) {
    for (const [origin, jar] of copyOf?.jars ?? []) this.jars.set(origin, new Map(jar));
  }

  async get(url: URL, headers: Record<string, string> = {}): Promise<RawResponse> {
    return this.send(url, 'GET', headers);
  }

  /** A request with this browser's cookies for the site; what it sets is kept. */
  async send(url: URL, method: string, headers: Record<string, string> = {}, body?: string): Promise<RawResponse> {
    const jar = this.jars.get(url.origin) ?? new Map<string, string>();
    this.jars.set(url.origin, jar);
    const cookie = [...jar].map(([name, value]) => `${name}=${value}`).join('; ');
    const response = await request(url.origin, {
      method,
      path: url.pathname + url.search,
      ca: url.origin === this.sites.provider.issuer ? this.sites.provider.ca : this.sites.gw.ca,
      headers: { ...(cookie ? { cookie } : {}), ...headers },
      body,
    });
    for (const line of response.headers['set-cookie'] ?? []) {
      const [pair, ...attributes] = line.split(';');
      const [name, ...value] = pair!.trim().split('=');
      if (attributes.some((attribute) => /^\s*max-age=0$/i.test(attribute)) || value.join('=') === '') jar.delete(name!);
      else jar.set(name!, value.join('='));
    }
    return response;
  }

  /** At the provider: follows its redirects, signs in as `login` when asked, up to the redirect back to the client. */
  async signInAtProvider(authorize: URL, login: string): Promise<URL> {
    const { provider } = this.sites;
    let url = authorize;
    for (let hop = 0; hop < 10; hop++) {
      const response = await this.get(url);
      if (response.status !== 302 && response.status !== 303) throw new Error(`the provider answered ${response.status} at ${url.pathname}: ${response.body} ${provider.stderr()}`);
      const next = new URL(String(response.headers.location), url);
      if (next.origin !== provider.issuer) return next;
      if (next.pathname.startsWith('/interaction/')) next.searchParams.set('login', login);
      url = next;
    }
    throw new Error('the provider did not send the browser back');
  }

  async sessionStatus(): Promise<number> {
    return (await this.get(new URL(`${this.sites.gw.url}/console/api/session`))).status;
  }

  async session(): Promise<Record<string, unknown>> {
    const response = await this.get(new URL(`${this.sites.gw.url}/console/api/session`));
    expect(response.status).toBe(200);
    return response.json();
  }
}

/** A whole sign-in: /login, the provider (as `login`), the callback. */
export async function attemptSignIn(sites: { provider: ProviderProcess; gw: GatewayProcess }, login: string, seen?: Set<string>) {
  const browser = new Browser(sites);
  const started = await browser.get(new URL(`${sites.gw.url}/console/api/oidc/login`));
  expect(started.status).toBe(302);
  const callback = await browser.signInAtProvider(new URL(String(started.headers.location)), login);
  seen?.add(callback.searchParams.get('code')!);
  const response = await browser.get(callback);
  return { browser, response };
}

/** The gateway's warn line for the refusal it answered with `response` (by its request id). */
export function refusalOf(gw: GatewayProcess, response: RawResponse): Promise<Record<string, unknown>> {
  const requestId = response.headers['x-request-id'];
  expect(requestId).toEqual(expect.any(String));
  return eventually(() => gw.log.find((line) => line.msg === 'OIDC sign-in refused' && line.level === 40 && line.requestId === requestId));
}

export function sessionCookieOf(response: RawResponse): string | undefined {
  return (response.headers['set-cookie'] ?? []).find((line) => SESSION_COOKIE_NAME.test(line));
}

export function expectRefused(response: RawResponse, expected: { status: number; code: string }): void {
  expect({ status: response.status, code: response.json().error.code }).toEqual(expected);
  expect(sessionCookieOf(response)).toBeUndefined();
}

export function payloadOf(jws: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString('utf8')) as Record<string, unknown>;
}

/**
 * A whole code flow for another client of the provider (not the gateway), as `login`: the tokens the
 * provider gives it, to see what the provider says (or, with the gateway's nonce, to hand the gateway
 * an ID token made for someone else). Codes and tokens are added to `seen`.
 */
export async function tokensFor(
  sites: { provider: ProviderProcess; gw: GatewayProcess },
  client: { client_id: string; client_secret: string; redirect_uris: string[] },
  login: string,
  { nonce = randomBytes(16).toString('base64url'), seen }: { nonce?: string; seen?: Set<string> } = {},
): Promise<{ idToken: string; accessToken: string }> {
  const { provider } = sites;
  const verifier = randomBytes(32).toString('base64url');
  const authorize = new URL(`${provider.issuer}/auth`);
  authorize.search = new URLSearchParams({
    client_id: client.client_id,
    response_type: 'code',
    redirect_uri: client.redirect_uris[0]!,
    scope: 'openid email profile groups',
    state: randomBytes(16).toString('base64url'),
    nonce,
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
  }).toString();
  const back = await new Browser(sites).signInAtProvider(authorize, login);
  const code = back.searchParams.get('code')!;
  seen?.add(code);
  const token = await request(provider.issuer, {
    method: 'POST',
    path: '/token',
    ca: provider.ca,
    headers: {
      authorization: `Basic ${Buffer.from(`${client.client_id}:${client.client_secret}`).toString('base64')}`,
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: client.redirect_uris[0]!, code_verifier: verifier }).toString(),
  });
  expect(token.status).toBe(200);
  const { id_token: idToken, access_token: accessToken } = token.json<{ id_token: string; access_token: string }>();
  seen?.add(idToken);
  seen?.add(accessToken);
  return { idToken, accessToken };
}

/** The `console.oidc` block the OIDC tests configure: the client `chatgate` at the test provider, mapping its `groups` claim. */
export function oidcSettings(issuer: string, mappings: ReadonlyArray<{ value: string; account?: string; role?: 'owner' | 'member'; admin?: boolean }>) {
  return { issuer, clientId: 'chatgate', clientSecretEnv: 'OIDC_SECRET', scopes: ['openid', 'email', 'profile', 'groups'], claim: 'groups', mappings };
}

/** A test provider and one gateway process on a file store, its console signing in there. */
export interface OidcSites {
  dir: string;
  /** The provider's certificate (the gateway trusts it through NODE_EXTRA_CA_CERTS). */
  certFile: string;
  provider: ProviderProcess;
  gw: GatewayProcess;
}

/**
 * Starts the provider and a gateway whose console.oidc maps `mappings` (with `console` settings of the
 * test's own beside it), the client secret in OIDC_SECRET; the caller configures the provider's clients.
 */
export async function startOidcSites(
  name: string,
  options: { mappings: Parameters<typeof oidcSettings>[1]; console?: Record<string, unknown>; env?: Record<string, string>; secret: string },
): Promise<OidcSites> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `chatgate-${name}-`));
  const tls = await loadOrCreateDevCertificate(path.join(dir, 'provider-tls'));
  const provider = await startProvider(tls.certFile, tls.keyFile, tls.cert);
  const gw = await startGatewayProcess(
    dir,
    'gw',
    {
      keyStore: { type: 'sqlite', path: path.join(dir, 'gw-store.db') },
      providers: { mock: { workers: ['http://127.0.0.1:9'] } },
      upstream: { health: { enabled: false } },
      console: { ...options.console, oidc: oidcSettings(provider.issuer, options.mappings) },
    },
    { OIDC_SECRET: options.secret, NODE_EXTRA_CA_CERTS: tls.certFile, ...options.env },
  );
  return { dir, certFile: tls.certFile, provider, gw };
}

export async function stopOidcSites(sites: Partial<OidcSites>): Promise<void> {
  if (sites.gw) await stopProcess(sites.gw.child);
  await stopProvider(sites.provider);
  if (sites.dir) rmSync(sites.dir, { recursive: true, force: true });
}
