/**
 * The body stage on Node's own IncomingMessage, fed by hand: what it reads, and when it refuses. The
 * integration tests (errors.test.ts) send the same failures over TLS; these reach the states a socket
 * cannot be timed into, such as a request already gone when the stage starts.
 */
import { IncomingMessage } from 'node:http';
import { Socket } from 'node:net';
import type { Request, Response } from 'express';
import { readAndValidateBody } from '../../src/pipeline/body';
import { contextOf, createContext } from '../../src/context';
import { GatewayError } from '../../src/errors';

const LIMIT = 1024;
const BODY = JSON.stringify({ model: 'mock/echo', messages: [{ role: 'user', content: 'Hi' }] });

function incoming(headers: Record<string, string>): IncomingMessage {
  const req = new IncomingMessage(new Socket());
  req.headers = headers;
  return req;
}

async function run(req: IncomingMessage): Promise<{ body?: string; error?: GatewayError }> {
  const res = { locals: {} } as Response;
  createContext(res, 0);
  try {
    await readAndValidateBody({ maxBytes: LIMIT, maxJsonDepth: 64, maxJsonElements: 1_000_000 })(req as Request, res, () => undefined);
    return { body: contextOf(res).body };
  } catch (error) {
    return { error: error as GatewayError };
  }
}

test('a body in several chunks is read whole', async () => {
  const req = incoming({ 'content-length': String(BODY.length) });
  const result = run(req);
  req.push(BODY.slice(0, 10));
  req.push(BODY.slice(10));
  req.push(null);
  expect(await result).toEqual({ body: BODY });
});

test('a request already gone when the stage starts: 400 invalid_request, not a wait that never ends', async () => {
  const req = incoming({ 'content-length': String(BODY.length) });
  req.destroy();
  await new Promise((resolve) => setImmediate(resolve)); // its 'close' has gone by
  const { error } = await run(req);
  expect(error).toBeInstanceOf(GatewayError);
  expect([error!.status, error!.code]).toEqual([400, 'invalid_request']);
});

test('a request that closes before its body ends: 400 invalid_request', async () => {
  const req = incoming({ 'content-length': String(BODY.length) });
  const result = run(req);
  req.push(BODY.slice(0, 10));
  await new Promise((resolve) => setImmediate(resolve));
  req.destroy();
  const { error } = await result;
  expect([error!.status, error!.code]).toEqual([400, 'invalid_request']);
});

test('a body shorter than its declared length: 400 invalid_request', async () => {
  const req = incoming({ 'content-length': String(BODY.length + 5) });
  const result = run(req);
  req.push(BODY);
  req.push(null);
  const { error } = await result;
  expect([error!.status, error!.code]).toEqual([400, 'invalid_request']);
});

test('an undeclared body that grows past the limit: 413, and the rest is not read', async () => {
  const req = incoming({ 'transfer-encoding': 'chunked' });
  const result = run(req);
  req.push(Buffer.alloc(LIMIT, 0x20));
  req.push(Buffer.alloc(1, 0x20));
  const { error } = await result;
  expect([error!.status, error!.code]).toEqual([413, 'request_too_large']);
  expect(req.isPaused()).toBe(true);
});

test('nesting past maxJsonDepth is refused before JSON.parse runs, naming the limit', async () => {
  const deep = '['.repeat(65) + ']'.repeat(65);
  const req = incoming({ 'content-length': String(deep.length) });
  const result = run(req);
  req.push(deep);
  req.push(null);
  const { error } = await result;
  expect([error!.status, error!.code, error!.message]).toEqual([400, 'invalid_body', 'The request body nests arrays and objects more than 64 levels deep.']);
});
