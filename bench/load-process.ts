/**
 * The load generator (load.ts) as its own process, so that its CPU and its pauses are not the runner's:
 * tasks run in turn there, each result heard as it comes.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { parseLoadLine } from './figures';
import type { Task } from './load';

/** load.js when built (dist/bench), else load.ts compiled as it loads (the scale run's smoke test runs from source). */
function loadGenerator(): string[] {
  const built = path.join(__dirname, 'load.js');
  return existsSync(built) ? [built] : ['--require', path.join(__dirname, 'swc-register.cjs'), path.join(__dirname, 'load.ts')];
}

export function load<T>(task: Task, onPlateau?: () => void): Promise<T> {
  return loadInSequence([task], () => undefined, onPlateau).then(([result]) => result as T);
}

/**
 * One load generator process runs the tasks in turn; `onResult` hears each result as it comes. A task
 * marked `afterGo` starts once what `onResult` returned for the task before has settled. The run
 * settles once the process has exited and every `onResult` has settled: the last task's, which the
 * exit can overtake, rejects the run as an earlier one does.
 */
export function loadInSequence(tasks: Task[], onResult: (index: number, result: unknown) => void | Promise<void>, onPlateau?: () => void): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...loadGenerator(), JSON.stringify(tasks)], { stdio: ['pipe', 'pipe', 'inherit'] });
    child.stdin!.on('error', () => undefined); // the child has ended: its exit says how
    const results: unknown[] = [];
    const heard: Promise<unknown>[] = [];
    let failed = false;
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const message = parseLoadLine(line);
      if (message.plateau) onPlateau?.();
      if (message.result !== undefined && message.index !== undefined) {
        results[message.index] = message.result;
        const index = message.index;
        // Called in a promise's step, so that one which throws at once rejects the run as one that fails later does.
        const hearing = Promise.resolve()
          .then(() => onResult(index, message.result))
          .then(
            () => tasks[index + 1]?.afterGo && child.stdin!.write('go\n'),
            (err: unknown) => {
              failed = true;
              child.kill();
              reject(err);
            },
          );
        heard.push(hearing);
      }
    });
    // 'close': the process has exited and its output has been read to the end, every line handed out;
    // what each onResult makes of its result may still be under way.
    child.on('close', (code) => {
      void Promise.all(heard).then(() => {
        if (failed) return;
        if (results.length === tasks.length && !results.includes(undefined)) resolve(results);
        else reject(new Error(`load generator exited with ${code}`));
      });
    });
  });
}
