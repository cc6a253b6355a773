/**
 * flattenStoredHead reports whether the answer had a stored head: the proxy stage keeps trying until
 * it has (a stream's first chunk can be all held back by the usage meter, so nothing is written yet).
 * A real server and socket; whether the head ends up flat is read in a heap snapshot by
 * stream-memory.test.ts.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { flattenStoredHead } from '../../src/stored-head';

test('no head before the first write, a head to flatten after it, the answer intact', async () => {
  const seen: boolean[] = [];
  const server = http.createServer((_req, res) => {
    res.setHeader('content-type', 'text/event-stream');
    res.setHeader('x-request-id', 'req-1');
    seen.push(flattenStoredHead(res));
    res.write('data: one\n\n');
    seen.push(flattenStoredHead(res));
    res.end('data: [DONE]\n\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const answer = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    expect(answer.headers.get('x-request-id')).toBe('req-1');
    expect(await answer.text()).toBe('data: one\n\ndata: [DONE]\n\n');
    expect(seen).toEqual([false, true]);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});
