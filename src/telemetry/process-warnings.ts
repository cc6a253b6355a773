/**
 * Node's process warnings as log lines. Node prints them as plain text on stderr, which breaks a log
 * that is otherwise one JSON object per line, and on Node 22 and later (the Docker image runs 24)
 * every process printed one at its first proxied request: http-proxy 1.18 calls `util._extend`,
 * deprecated at run time since Node 22 (DEP0060). The fix is known upstream and unmerged
 * (http-party/node-http-proxy#1715); `util._extend` still exists on Node 26, and http-proxy's use of it
 * (a shallow copy) is covered by the proxy's tests, so that one is logged at debug. Any other warning
 * is logged at warn. A process started with `--no-warnings` (or NODE_NO_WARNINGS=1) has no printer to
 * replace, and stays silent.
 */
import type { Logger } from './log';

const KNOWN_DEPENDENCY_WARNINGS: Readonly<Record<string, string>> = {
  DEP0060: 'http-proxy 1.18 calls util._extend (http-party/node-http-proxy#1715)',
};

export function logProcessWarnings(log: Logger): void {
  const nodePrinters = process.listeners('warning');
  if (nodePrinters.length === 0) return;
  for (const printer of nodePrinters) process.off('warning', printer);
  process.on('warning', (warning) => logWarning(log, warning));
}

function logWarning(log: Logger, warning: Error & { code?: string }): void {
  const fields = { warning: { name: warning.name, code: warning.code, message: warning.message } };
  const knownCause = warning.code === undefined ? undefined : KNOWN_DEPENDENCY_WARNINGS[warning.code];
  if (knownCause !== undefined) log.debug({ ...fields, knownCause }, 'Node.js process warning from a dependency');
  else log.warn(fields, 'Node.js process warning');
}
