/** A TCP port on 127.0.0.1 that nothing listened on a moment ago (tests and the benchmark). */
import net from 'node:net';

export function freePort(): Promise<number> {
  const server = net.createServer();
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    }),
  );
}
