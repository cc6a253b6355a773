/** Loopback sockets for tests and the benchmark. */
import type http from 'node:http';
import net from 'node:net';

/** A TCP port on 127.0.0.1 that nothing listened on a moment ago. */
export function freePort(): Promise<number> {
  const server = net.createServer();
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    }),
  );
}

/** Listen on a free port of 127.0.0.1; resolves with the server's base URL (`http://127.0.0.1:<port>`). */
export function listenOnLoopback(server: http.Server): Promise<string> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}`)));
}
