import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLogger, destinationOf } from '../../src/log';

test('a log file gets every line whole and in order, lines longer than one write included', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-log-'));
  try {
    const file = path.join(dir, 'gateway.log');
    const destination = destinationOf(file);
    const log = createLogger('info', destination);
    const long = 'x'.repeat(10_000); // more than one write of the destination's buffer
    for (let burst = 0; burst < 50; burst++) {
      for (let i = 0; i < 40; i++) log.info({ n: burst * 40 + i, text: i === 7 ? long : 'y'.repeat(600) }, 'line');
      await new Promise((resolve) => setImmediate(resolve)); // let writes be under way while lines pile up
    }
    const closed = new Promise((resolve) => (destination as unknown as NodeJS.EventEmitter).once('close', resolve));
    (destination as unknown as { end(): void }).end(); // writes what is pending, then closes
    await closed;
    const lines = readFileSync(file, 'utf8').trimEnd().split('\n').map((line) => JSON.parse(line) as { n: number; text: string });
    expect(lines.map((line) => line.n)).toEqual(Array.from({ length: 2000 }, (_, n) => n));
    expect(lines.filter((line) => line.text === long)).toHaveLength(50);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
