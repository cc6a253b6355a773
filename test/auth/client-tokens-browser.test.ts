/**
 * A client token used the way it is meant to be: by a script on a web page, in headless Chromium. A
 * page on a configured origin calls the gateway with the token (the browser's own CORS preflight,
 * then the answer read); the same script on another origin is stopped by the browser.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, request } from '../helpers/http';
import { startWorker, type WorkerProcess } from '../helpers/processes';

const PAGE = '<!doctype html><title>app</title><p>app</p>';
const pages = () => http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE));
const listen = (server: http.Server, host: string) => new Promise<string>((resolve) => server.listen(0, host, () => resolve(`http://${host}:${(server.address() as AddressInfo).port}`)));

let worker: WorkerProcess;
let gw: TestGateway;
let browser: Browser;
const [app, elsewhere] = [pages(), pages()];
let appOrigin: string;
let otherOrigin: string;

beforeAll(async () => {
  [appOrigin, otherOrigin] = await Promise.all([listen(app, '127.0.0.1'), listen(elsewhere, '127.0.0.2')]);
  [worker, browser] = await Promise.all([startWorker(), chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] })]);
  gw = await startTestGateway({ providers: { mock: { workers: [worker.url] } }, clientTokens: { allowedOrigins: [appOrigin] } });
}, 30_000);
afterAll(async () => {
  await browser?.close();
  await gw?.stop();
  await worker?.stop();
  app.close();
  elsewhere.close();
});

/** What the page's script gets from the gateway: the answer's text, or the browser's error. */
async function callFrom(origin: string, token: string): Promise<{ status?: number; content?: string; failed?: string }> {
  const context = await browser.newContext({ ignoreHTTPSErrors: true });
  try {
    const page = await context.newPage();
    await page.goto(origin);
    return await page.evaluate(
      async ({ url, token }) => {
        try {
          const answer = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'mock/echo', messages: [{ role: 'user', content: 'from the page' }] }) });
          const body = await answer.json();
          return { status: answer.status, content: body.choices?.[0]?.message?.content as string | undefined };
        } catch (err) {
          return { failed: String(err) };
        }
      },
      { url: `${gw.url}/v1/chat/completions`, token },
    );
  } finally {
    await context.close();
  }
}

test('a page on an allowed origin calls the gateway with a client token; the same script on another origin is stopped by the browser', async () => {
  const { key } = await gw.issueKey({ name: 'web' });
  const minted = await request(gw.url, { path: '/v1/client-tokens', ca: gw.ca, headers: { ...bearer(key), 'content-type': 'application/json' }, body: '{"ttlSeconds": 300}' });
  const { token } = minted.json<{ token: string }>();

  const fromApp = await callFrom(appOrigin, token);
  expect(fromApp.status).toBe(200);
  expect(fromApp.content).toContain('from the page');

  const fromElsewhere = await callFrom(otherOrigin, token);
  expect(fromElsewhere.status).toBeUndefined();
  expect(fromElsewhere.failed).toMatch(/Failed to fetch/);
}, 60_000);
