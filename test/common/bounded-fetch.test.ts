/**
 * The fetch of a document from a party we do not run: its deadline holds through the body (a server
 * that sends its headers and then trickles bytes is cut), a body past its bound and a redirect are
 * refused, an error answer is an error; what it says names the URL, never the body.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fetchBoundedText } from '../../src/common/bounded-fetch';

let server: http.Server;
let base: string;
const trickling = new Set<NodeJS.Timeout>();

beforeAll(async () => {
  server = http.createServer((req, res) => {
    if (req.url === '/ok') return res.writeHead(200, { 'content-type': 'application/json' }).end('{"keys":[]}');
    if (req.url === '/big') return res.writeHead(200).end('x'.repeat(5000));
    if (req.url === '/redirect') return res.writeHead(302, { location: '/ok' }).end();
    if (req.url === '/error') return res.writeHead(500).end('secret body');
    // /trickle: headers at once, then a byte every 50 ms, for ever.
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{');
    const timer = setInterval(() => res.write(' '), 50);
    trickling.add(timer);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  for (const timer of trickling) clearInterval(timer);
  server.closeAllConnections();
  server.close();
});

test('a whole document within its bound is read', async () => {
  await expect(fetchBoundedText(`${base}/ok`, 1000, 2000)).resolves.toBe('{"keys":[]}');
});

test('a server that trickles its body is cut at the deadline', async () => {
  await expect(fetchBoundedText(`${base}/trickle`, 1_000_000, 400)).rejects.toThrow(/did not answer within 400 ms/);
});

test('a body past the bound, a redirect and an error answer are refused, never quoted', async () => {
  await expect(fetchBoundedText(`${base}/big`, 1000, 2000)).rejects.toThrow(/more than 1000 bytes/);
  await expect(fetchBoundedText(`${base}/redirect`, 1000, 2000)).rejects.toThrow();
  const error = await fetchBoundedText(`${base}/error`, 1000, 2000).catch((err: Error) => err);
  expect((error as Error).message).toBe(`${base}/error answered 500`);
});
