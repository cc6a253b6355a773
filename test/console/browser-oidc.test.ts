/**
 * The account console in a real browser (headless Chromium through playwright-core), signing in with
 * OpenID Connect: a real OpenID Provider (oidc-provider, test/helpers/oidc-provider.mjs) in its own
 * process over HTTPS on loopback, the gateway as its own process (`node dist/cli.js serve`, as
 * test/console/oidc.test.ts runs it: openid-client is ESM only) trusting the provider's certificate
 * through NODE_EXTRA_CA_CERTS, and a real mock worker. At desktop (1280×800) and phone (375×667)
 * sizes: the console's identity-provider link, clicked; the provider's sign-in page, where the person
 * types their email and submits; the redirect back to the console, signed in (their email, the
 * account their group maps to and its role in the header); a key made in the Keys tab, shown once,
 * copied, and used; signing out (the old session refused). Nothing of the flow is mocked: the
 * provider's authorization endpoint, its redirects and cookies, the gateway's callback and its token
 * exchange are all real. Any console error (a CSP violation among them) or page error fails it.
 * Screenshots go to artifacts/console/oidc-<size>-NN-*.png.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { chromium, type Browser, type Page } from 'playwright-core';
import { displayPrefix } from '../../src/auth/keys';
import { loadOrCreateDevCertificate } from '../../src/process/dev-certificate';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { openConsoleWindow, type ConsoleWindow } from '../helpers/console-window';
import { bearer, chatBody, request } from '../helpers/http';
import { oidcSettings } from '../helpers/oidc';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

/** The few browser globals the functions run in the page use (the project's tsconfig has no DOM library). */
declare const document: {
  documentElement: { scrollWidth: number; outerHTML: string };
  getElementById(id: string): { textContent: string | null; firstChild: { textContent: string | null } | null } | null;
  addEventListener(type: 'securitypolicyviolation', listener: (event: { violatedDirective: string; blockedURI: string }) => void): void;
};
declare const window: { innerWidth: number };
declare const navigator: { clipboard: { writeText(text: string): Promise<void>; readText(): Promise<string> } };

const PROVIDER_SCRIPT = path.join(__dirname, '..', 'helpers', 'oidc-provider.mjs');
const ARTIFACTS = path.join(__dirname, '..', '..', 'artifacts', 'console');
const CHROMIUM = '/usr/bin/chromium';
const CLIENT_ID = 'chatgate';
const SECRET = 'gateway-secret-for-the-console-browser-oidc-test';
/** A person the provider knows (PEOPLE in oidc-provider.mjs): it says Alice@Example.com, in groups team-a-owners and staff. */
const PERSON = 'alice@example.com';
const STEP_MS = 20_000;

interface ProviderProcess {
  child: ChildProcess;
  issuer: string;
  send(command: Record<string, unknown>): Promise<Record<string, unknown>>;
  stderr(): string;
}

let dir: string;
let provider: ProviderProcess;
let worker: WorkerProcess;
let gw: GatewayProcess;
let browser: Browser;

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-browser-oidc-'));
  const tls = await loadOrCreateDevCertificate(path.join(dir, 'provider-tls'));
  [provider, worker, browser] = await Promise.all([
    startProvider(tls.certFile, tls.keyFile),
    startWorker(),
    chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'] }),
  ]);
  gw = await startGatewayProcess(
    dir,
    'gw',
    {
      keyStore: { type: 'sqlite', path: path.join(dir, 'gw-store.db') },
      providers: { mock: { workers: [worker.url] } },
      auth: { createFirstKey: false, lastUsedFlushMs: 100 },
      console: {
        oidc: oidcSettings(provider.issuer, [
            { value: 'team-a-owners', account: 'team-a', role: 'owner' },
            { value: 'team-b-members', account: 'team-b', role: 'member' },
          ]),
      },
    },
    { OIDC_SECRET: SECRET, NODE_EXTRA_CA_CERTS: tls.certFile },
  );
  // The provider knows the gateway's client once the gateway's callback URL (its port) is known.
  await provider.send({ cmd: 'configure', clients: [{ client_id: CLIENT_ID, client_secret: SECRET, redirect_uris: [`${gw.url}/console/api/oidc/callback`] }] });
}, 30_000);

afterAll(async () => {
  await browser?.close();
  if (gw) await stopProcess(gw.child);
  if (provider) {
    provider.child.stdin!.end();
    await stopProcess(provider.child);
  }
  await worker?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

type Window = ConsoleWindow;
const openWindow = (viewport: { width: number; height: number }) => openConsoleWindow(browser, gw.url, viewport);

const SIZES = [
  { size: 'desktop', viewport: { width: 1280, height: 800 } },
  { size: 'phone', viewport: { width: 375, height: 667 } },
] as const;

describe.each(SIZES)('signing in to the console with the identity provider at $size size ($viewport.width×$viewport.height)', ({ size, viewport }) => {
  const keyName = `oidc-${size}`;
  let win: Window;
  let page: Page;
  let key: string;
  let keyId: string;

  const shot = async (name: string) => {
    await page.screenshot({ path: path.join(ARTIFACTS, `oidc-${size}-${name}.png`), fullPage: true });
    if (size === 'phone') {
      const widths = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth }));
      expect({ screen: name, ...widths, scrollsSideways: widths.scroll > widths.inner }).toEqual({ screen: name, ...widths, scrollsSideways: false });
    }
  };
  const row = (name: string) => page.locator(`[data-testid="key-row"][data-key-name="${name}"]`);
  const pageHolds = (text: string) => page.evaluate((secret) => document.documentElement.outerHTML.includes(secret), text);
  const cookieNamed = async (name: string) => (await win.context.cookies()).find((cookie) => cookie.name === name);

  beforeAll(async () => {
    win = await openWindow(viewport);
    page = win.page;
  });

  afterAll(async () => {
    await win?.context.close();
  });

  test('1. the identity-provider link, the provider’s sign-in page (the email typed, the form sent), and back in the console, signed in', async () => {
    await page.goto(`${gw.url}/console/`);
    await page.getByTestId('signin-view').waitFor();
    const link = page.getByTestId('oidc-link');
    await link.waitFor(); // shown once GET /console/api/config says oidc: true
    await expect(link.textContent()).resolves.toBe('Sign in with your identity provider');
    await shot('01-sign-in');

    await link.click();
    // The provider's own page: the gateway sent the browser to its authorization endpoint, which sent it here.
    await page.waitForURL((url) => url.origin === provider.issuer && url.pathname.startsWith('/interaction/'));
    const email = page.getByLabel('Email');
    await email.waitFor();
    await shot('02-provider-sign-in');
    await email.fill(PERSON);
    await page.getByRole('button', { name: 'Sign in' }).click();

    // The provider's redirects, the gateway's callback (code exchanged, ID token checked), then the console.
    await page.waitForURL(`${gw.url}/console/`);
    await page.getByTestId('app-view').waitFor();
    expect(page.url()).toBe(`${gw.url}/console/`); // no code or state left in the address bar
    await expect(page.getByTestId('session-bar').isVisible()).resolves.toBe(true);
    // The provider says Alice@Example.com: the gateway keys people by the lower-case email.
    await expect(page.getByTestId('signed-in-email').textContent()).resolves.toBe(PERSON);
    // One account (team-a-owners maps to team-a as owner; staff maps to nothing): its name and role, no switcher.
    const account = page.getByTestId('account-name');
    await expect(account.isVisible()).resolves.toBe(true);
    await expect(page.evaluate(() => document.getElementById('account-name')?.firstChild?.textContent)).resolves.toBe('team-a');
    await expect(account.locator('.role-badge').textContent()).resolves.toBe('owner');
    await expect(page.getByTestId('account-switcher').isVisible()).resolves.toBe(false);
    await expect(page.getByTestId('tab-audit').isVisible()).resolves.toBe(true); // an owner's
    await expect(page.getByTestId('tab-keys').getAttribute('aria-selected')).resolves.toBe('true');
    // The account's keys: none at the first sign-in; at the second (phone), the key made at the first, the same account.
    if (size === 'desktop') await page.getByTestId('keys-empty').waitFor();
    else await row('oidc-desktop').waitFor();

    // The session cookie is the gateway's; the sign-in's browser binding is spent.
    expect(await cookieNamed('__Host-chatgate_session')).toMatchObject({ httpOnly: true, secure: true, sameSite: 'Strict', path: '/' });
    expect(await cookieNamed('chatgate_oidc')).toBeUndefined();
    const session = await request(gw.url, { ca: gw.ca, method: 'GET', path: '/console/api/session', headers: { cookie: `__Host-chatgate_session=${(await cookieNamed('__Host-chatgate_session'))!.value}` } });
    expect(session.status).toBe(200);
    expect(session.json()).toMatchObject({ email: PERSON, via: 'oidc', admin: false, account: { name: 'team-a', role: 'owner' } });
    await shot('03-signed-in');
  }, STEP_MS);

  test('2. the Keys tab: a key made, its secret shown once and copied, it works; listed without the clear key', async () => {
    await page.getByTestId('new-key-button').click();
    const form = page.getByTestId('key-form');
    await form.getByLabel('Name').fill(keyName);
    await shot('04-create-key-form');
    await page.getByTestId('key-form-submit').click();
    const panel = page.getByTestId('secret-panel');
    await panel.waitFor();
    await expect(panel.textContent()).resolves.toContain('will not be shown again');
    key = (await page.getByTestId('secret-value').textContent())!.trim();
    expect(key).toMatch(/^cgk_[A-Za-z0-9]{49}$/);
    await row(keyName).waitFor();
    await expect(page.getByTestId('keys-table').textContent()).resolves.not.toContain(key);
    await shot('05-key-created');

    // Copied with the Copy button, read back from the clipboard.
    await page.evaluate(() => navigator.clipboard.writeText('nothing copied yet'));
    await page.getByTestId('secret-copy').click();
    await page.waitForFunction(() => document.getElementById('secret-copy-state')?.textContent === 'Copied to the clipboard.');
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(key);

    keyId = (await row(keyName).getAttribute('data-key-id'))!;
    expect(keyId).toMatch(/^key_/);
    const chat = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() });
    expect(chat.status).toBe(200);

    await page.getByTestId('secret-done').click();
    await panel.waitFor({ state: 'hidden' });
    expect(await pageHolds(key)).toBe(false);
    const listed = row(keyName);
    await expect(listed.getByTestId('key-prefix').textContent()).resolves.toBe(`${displayPrefix(key)}…`);
    await expect(listed.getByTestId('key-status').textContent()).resolves.toBe('active');
    await expect(listed.getByTestId('key-created-by').textContent()).resolves.toBe(`by ${PERSON}`);
    await shot('06-keys');
  }, STEP_MS);

  test('3. signing out: the sign-in view again, with the identity-provider link, and the old session is refused', async () => {
    const session = `__Host-chatgate_session=${(await cookieNamed('__Host-chatgate_session'))!.value}`;
    await page.getByTestId('sign-out').click();
    await page.getByTestId('signin-view').waitFor();
    await expect(page.getByTestId('session-bar').isVisible()).resolves.toBe(false);
    await expect(page.getByTestId('app-view').isVisible()).resolves.toBe(false);
    await expect(page.getByTestId('oidc-link').isVisible()).resolves.toBe(true);
    await expect(page.locator('#keys-body').textContent()).resolves.toBe('');
    expect(await pageHolds(keyName)).toBe(false);
    expect(await cookieNamed('__Host-chatgate_session')).toBeUndefined();
    const refused = await request(gw.url, { ca: gw.ca, method: 'GET', path: '/console/api/keys', headers: { cookie: session } });
    expect(refused.status).toBe(401);
    expect(refused.json().error.code).toBe('not_signed_in');
    // The key lives on: signing out ends the session, not the keys.
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
    await shot('07-signed-out');
  }, STEP_MS);

  test('the sign-in is audited as made with OpenID Connect', async () => {
    const audited = await eventually(() => gw.log.find((line) => line.log === 'audit' && line.action === 'key.created' && line.target === keyId));
    expect(audited).toMatchObject({ actor: PERSON });
    const sessions = gw.log.filter((line) => line.log === 'audit' && line.action === 'session.created' && line.actor === PERSON);
    expect(sessions.length).toBeGreaterThanOrEqual(1);
    for (const line of sessions) expect(line.details).toMatchObject({ via: 'oidc' });
  });

  test('no console errors (no CSP violation among them), no failed loads, and only the refusal of the first visit', () => {
    expect(win.problems).toEqual([]);
    // The page asks for the session on its first load, before anyone signed in: 401. Back from the provider, it has one.
    expect(win.refusals).toEqual(['GET /console/api/session 401']);
  });
});

describe('a person the provider signs in but no mapping lets in', () => {
  let win: Window;

  beforeAll(async () => {
    win = await openWindow({ width: 1280, height: 800 });
  });
  afterAll(async () => {
    await win?.context.close();
  });

  test('is sent back to the console, which says why; no session', async () => {
    const { page } = win;
    await page.goto(`${gw.url}/console/`);
    await page.getByTestId('oidc-link').click();
    await page.waitForURL((url) => url.origin === provider.issuer && url.pathname.startsWith('/interaction/'));
    await page.getByLabel('Email').fill('erin@example.com'); // in the group staff, which maps to nothing
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${gw.url}/console/`); // the refusal's #sign-in-error=… is read, then cleared
    await page.getByTestId('signin-view').waitFor();
    await expect(page.locator('#signin-error').textContent()).resolves.toContain('not given an account here');
    expect(page.url()).toBe(`${gw.url}/console/`);
    expect((await win.context.cookies()).find((cookie) => cookie.name === '__Host-chatgate_session')).toBeUndefined();
    await page.screenshot({ path: path.join(ARTIFACTS, 'oidc-desktop-08-refused.png'), fullPage: true });
    expect(win.problems).toEqual([]);
    expect(win.refusals).toEqual(['GET /console/api/session 401']); // the first visit's; back from the refusal, the page asks nothing
  }, STEP_MS);
});

/** test/helpers/oidc-provider.mjs as a process: listening at once, configured by command. */
function startProvider(certFile: string, keyFile: string): Promise<ProviderProcess> {
  const child = spawn(process.execPath, [PROVIDER_SCRIPT, certFile, keyFile], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const waiting = new Map<number, (answer: Record<string, unknown>) => void>();
  let nextId = 1;
  return new Promise((resolve, reject) => {
    const bound = setTimeout(() => reject(new Error(`the OpenID Provider did not listen in time: ${stderr}`)), 15_000);
    child.once('exit', (code, signal) => reject(new Error(`the OpenID Provider exited with ${code ?? signal}: ${stderr}`)));
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const message = JSON.parse(line) as Record<string, unknown>;
      if (typeof message.id === 'number') {
        waiting.get(message.id)?.(message);
        waiting.delete(message.id);
      }
      if (message.event === 'listening') {
        clearTimeout(bound);
        resolve({
          child,
          issuer: `https://127.0.0.1:${message.port as number}`,
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
