/**
 * The primary's messages to serving processes: delivered while the channel is open, and never an
 * exception once a process has disconnected on its way out (that used to take the primary down).
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { tell } from '../../src/process/cluster';

const CHILD = `
process.on('message', (message) => {
  process.send({ echo: message });
  if (message.type === 'chatgate:key-changes') process.disconnect();
});
`;

test('a message reaches a connected process; after it disconnected, tell() returns false and nothing throws', async () => {
  const child = fork('-e', [CHILD], { execArgv: ['-e', CHILD], stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const worker = { isConnected: () => child.connected, send: child.send.bind(child) as never };
  try {
    const echoed = once(child, 'message');
    expect(tell(worker, { type: 'chatgate:key-changes', digests: ['d1'] })).toBe(true);
    expect((await echoed)[0]).toEqual({ echo: { type: 'chatgate:key-changes', digests: ['d1'] } });
    if (child.connected) await once(child, 'disconnect');

    let failed = false;
    expect(tell(worker, { type: 'chatgate:readiness', id: 1 }, () => (failed = true))).toBe(false);
    expect(failed).toBe(false);
  } finally {
    child.kill();
  }
});
