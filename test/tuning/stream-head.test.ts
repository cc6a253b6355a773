/**
 * sendStreamHead sends the head before any of the body, on a real server and socket. Whether the head
 * Node keeps ends up flat is read in a heap snapshot by stream-memory.test.ts.
 */
import http from 'node:http';
import { sendStreamHead } from '../../src/tuning/stream-head';
import { listenOnLoopback } from '../helpers/net';

test('the head reaches the client before any of the body is written, and the body follows it intact', async () => {
  let writeBody: (() => void) | undefined;
  const server = http.createServer((_req, res) => {
    res.setHeader('content-type', 'text/event-stream');
    res.setHeader('x-request-id', 'req-1');
    sendStreamHead(res);
    writeBody = () => res.end('data: one\n\ndata: [DONE]\n\n');
  });
  const url = await listenOnLoopback(server);
  try {
    const answer = await fetch(url); // resolves on the head: without it sent, the body is never written
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-request-id')).toBe('req-1');
    expect(answer.headers.get('content-type')).toBe('text/event-stream');
    writeBody!();
    expect(await answer.text()).toBe('data: one\n\ndata: [DONE]\n\n');
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});
