/** `chatgate mock-worker`: run the mock worker alone. Prints one JSON line once it listens. */
import type { AddressInfo } from 'node:net';
import { createMockWorker, type MockWorkerOptions } from './server';

export function runMockWorker(host: string, port: number, options: MockWorkerOptions): void {
  const server = createMockWorker(options);
  server.listen(port, host, () => {
    const address = server.address() as AddressInfo;
    process.stdout.write(`${JSON.stringify({ msg: 'mock worker listening', host: address.address, port: address.port })}\n`);
    process.send?.({ port: address.port });
  });
  server.on('error', (err) => {
    process.stderr.write(`mock worker: ${err.message}\n`);
    process.exit(1);
  });
  const stop = () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // Started by a gateway: go when it goes.
  process.on('disconnect', stop);
}
