/**
 * `chatgate serve`: the gateway, until SIGTERM or SIGINT drains it; SIGHUP reloads it.
 */
import { configFileFrom } from '../config';
import { whenNpmParentGone } from '../process/parent-watch';
import type { Gateway } from '../process/startup';
import { turnOffPretenuring } from '../tuning/pretenuring';
import { parse } from './flags';

// Loaded when it serves: the other commands start fast without the gateway's stack.
const gateway = () => import('../main.js');

export async function serve(args: string[]): Promise<number> {
  const { values } = parse(args, { config: { type: 'string' } });
  turnOffPretenuring(); // before the gateway allocates anything
  // Listening before the start: a signal that arrives while the gateway starts (an orchestrator that
  // gives up, a quick Ctrl-C, a reload sent at once) must act on it once it is up, not kill it
  // half-built by the signal's default action. The first SIGTERM or SIGINT starts the drain; later
  // ones (a terminal's Ctrl-C reaches every process of a cluster, and the primary then asks too)
  // change nothing.
  let running: Gateway | undefined;
  let reloadAsked = false;
  process.on('SIGHUP', () => {
    if (running) void running.reload();
    else reloadAsked = true;
  });
  const stopAsked = new Promise<void>((resolve) => {
    process.on('SIGTERM', resolve);
    process.on('SIGINT', resolve);
    whenNpmParentGone(resolve); // npm passes no signal on (process/parent-watch.ts)
  });
  running = await (await gateway()).startGateway(configFileFrom(values.config));
  if (reloadAsked) void running.reload(); // the start may have read the file before it changed
  await stopAsked;
  await running.shutdown();
  if (process.connected) process.disconnect(); // a cluster serving process: let the IPC channel go
  return 0;
}
