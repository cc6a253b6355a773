/**
 * The public listeners create requests and responses that already have Express's prototypes, so
 * Express never swaps them (the swap slows every later property access). Each app sharing those
 * prototypes must still be the one its requests and responses see as `app`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { parseConfig } from '../../src/config';
import { loadOrCreateDevCertificate } from '../../src/process/dev-certificate';
import { ExpressRequest, ExpressResponse, useSharedPrototypes } from '../../src/tuning/express-prototypes';
import { openListeners, type Listeners } from '../../src/process/listeners';
import { request as send } from '../helpers/http';

interface Seen {
  requestPrototypeKept: boolean;
  responsePrototypeKept: boolean;
  appIsOwn: boolean;
}

/** An app whose JSON answers are indented by `spaces` (a per-app setting res.json reads through res.app). */
function appWithJsonSpaces(spaces: number, seen: Seen[]): express.Express {
  const app = express();
  app.set('json spaces', spaces);
  useSharedPrototypes(app);
  app.post('/echo', (req, res) => {
    seen.push({
      requestPrototypeKept: Object.getPrototypeOf(req) === ExpressRequest.prototype,
      responsePrototypeKept: Object.getPrototypeOf(res) === ExpressResponse.prototype,
      appIsOwn: req.app === app && res.app === app,
    });
    res.json({ path: req.path, client: req.ip });
  });
  return app;
}

describe('Express on shared prototypes', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-prototypes-'));
  let listeners: Listeners;
  let ca: string;
  const seen: Seen[] = [];
  const compact = appWithJsonSpaces(0, seen);
  const indented = appWithJsonSpaces(2, seen);
  let current = compact;
  const born: boolean[] = [];

  beforeAll(async () => {
    const certificate = await loadOrCreateDevCertificate(path.join(dir, 'tls'));
    ca = certificate.cert;
    const config = parseConfig({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, providers: { unused: { workers: ['http://127.0.0.1:9'] } } });
    listeners = await openListeners(config, {
        publicApp: (req, res) => {
          born.push(req instanceof ExpressRequest && res instanceof ExpressResponse);
          current(req, res);
        },
        adminApp: undefined,
      }, certificate, {
      plainHttpRefused: () => undefined,
      clientErrorRefused: () => undefined,
    });
  });
  afterAll(async () => {
    await listeners.drain(0);
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps the listener-made prototypes, and each app (as after a reload) sees itself as app', async () => {
    const base = `https://127.0.0.1:${listeners.publicAddress.port}`;
    const first = await send(base, { path: '/echo', ca });
    current = indented;
    const second = await send(base, { path: '/echo', ca });

    expect(born).toEqual([true, true]);
    expect(seen).toEqual([
      { requestPrototypeKept: true, responsePrototypeKept: true, appIsOwn: true },
      { requestPrototypeKept: true, responsePrototypeKept: true, appIsOwn: true },
    ]);
    expect(first.body).toBe('{"path":"/echo","client":"127.0.0.1"}');
    expect(second.body).toBe('{\n  "path": "/echo",\n  "client": "127.0.0.1"\n}');
  });

  it('still works for requests made by a plain Node server (supertest): Express swaps those as usual', async () => {
    const before = seen.length;
    const answer = await request(indented).post('/echo').expect(200);
    expect(answer.text).toContain('\n  "path": "/echo"');
    expect(seen.slice(before)).toEqual([{ requestPrototypeKept: true, responsePrototypeKept: true, appIsOwn: true }]);
  });
});
