/**
 * Under npm (`npx chatgate serve`, `npm start`) a SIGTERM sent to npm never reaches the gateway: npm
 * exits, the shell between goes with it, and the gateway ran on as an orphan. A process started by
 * npm (npm_command set) takes its parent going away (the process handed to another: its parent pid
 * changes) as the stop, within PARENT_CHECK_MS. Containers and supervisors run `node dist/cli.js
 * serve` directly, and no watch runs there.
 */

/** How often a gateway started by npm checks that its parent is still there. */
export const PARENT_CHECK_MS = 500;

/** Calls `gone` once when this process's parent changes, if npm started it; never otherwise. */
export function whenNpmParentGone(gone: () => void, env: NodeJS.ProcessEnv = process.env): void {
  if (env.npm_command === undefined) return;
  const parent = process.ppid;
  const check = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(check);
    gone();
  }, PARENT_CHECK_MS);
  check.unref();
}
