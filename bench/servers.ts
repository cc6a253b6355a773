/**
 * The benchmark's servers, each in its own process: `worker` (the mock worker over HTTP for the
 * proxies and over HTTPS for direct calls), `bare` (Node https + http-proxy, nothing else),
 * `express` (stock Express 5 + helmet + http-proxy, no auth or validation) and `tuned-express` (the
 * same with chatgate's framework settings: requests created on Express's prototypes, the API security
 * headers worked out once, no etag: what the stack costs before any stage of the gateway). Each prints
 * {"ports":...} once it listens. A proxy's connections to the worker are capped at 256, or at the
 * optional last argument (one per held stream, for the stream runs).
 */
import http from 'node:http';
import https from 'node:https';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import express from 'express';
import helmet from 'helmet';
import httpProxy from 'http-proxy';
import { ExpressRequest, ExpressResponse, useSharedPrototypes } from '../src/tuning/express-prototypes';
import { mockWorkerHandler } from '../src/mock-worker/server';
import { turnOffPretenuring } from '../src/tuning/pretenuring';
import { API_SECURITY_HEADERS, securityHeaders } from '../src/pipeline/security-headers';

const [role, certFile, keyFile, upstream, maxSockets = '256'] = process.argv.slice(2) as [string, string, string, string | undefined, string | undefined];
const tls = { cert: readFileSync(certFile), key: readFileSync(keyFile) };

function listen(server: http.Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

function proxyTo(target: string) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number(maxSockets) });
  const proxy = httpProxy.createProxyServer({ target, agent, ignorePath: true });
  proxy.on('error', (_err, _req, res) => {
    if ('writeHead' in res && !res.headersSent) res.writeHead(502);
    res.end();
  });
  return (req: http.IncomingMessage, res: http.ServerResponse) => proxy.web(req, res);
}

async function main(): Promise<Record<string, number>> {
  if (role === 'worker') {
    // Every target's requests end here, so a worker in V8's pretenuring state (src/pretenuring.ts)
    // slows them all: under the direct rounds it promoted 0.32 MB per young collection, 0.00 without.
    turnOffPretenuring();
    const handler = mockWorkerHandler({ latencyMs: 0, tokensPerSecond: 1_000_000 });
    return { http: await listen(http.createServer({ keepAliveTimeout: 60_000 }, handler)), https: await listen(https.createServer({ ...tls, keepAliveTimeout: 60_000 }, handler)) };
  }
  const target = `${upstream}/v1/chat/completions`;
  if (role === 'bare') return { https: await listen(https.createServer({ ...tls, keepAliveTimeout: 60_000 }, proxyTo(target))) };
  if (role === 'express') {
    const app = express();
    app.use(helmet());
    app.post('/v1/chat/completions', proxyTo(target));
    return { https: await listen(https.createServer({ ...tls, keepAliveTimeout: 60_000 }, app)) };
  }
  if (role === 'tuned-express') {
    const app = express();
    app.disable('x-powered-by');
    app.disable('etag');
    useSharedPrototypes(app);
    app.post('/v1/chat/completions', securityHeaders(API_SECURITY_HEADERS), proxyTo(target));
    return { https: await listen(https.createServer({ ...tls, keepAliveTimeout: 60_000, IncomingMessage: ExpressRequest, ServerResponse: ExpressResponse }, app)) };
  }
  throw new Error(`unknown role ${role}`);
}

main().then(
  (ports) => process.stdout.write(`${JSON.stringify({ ports })}\n`),
  (err: Error) => {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  },
);
process.on('disconnect', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0)); // exit normally, so --cpu-prof writes its profile
