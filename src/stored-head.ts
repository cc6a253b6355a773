/**
 * Node keeps an answer's head (`_header`: its status line and header lines) for as long as the answer
 * lasts, in the form it built it by concatenation: a tree of some fifty strings, about 1.2 KiB an open
 * stream. Read as a number, the head is flattened by V8 in place into one string, and the tree is let
 * go (test/integration/stream-memory.test.ts reads it in a heap snapshot of an open stream).
 */
import type { ServerResponse } from 'node:http';

/** Whether the answer had a stored head to flatten; until it has, there is nothing to do. */
export function flattenStoredHead(res: ServerResponse): boolean {
  const head = (res as { _header?: unknown })._header;
  if (typeof head !== 'string') return false;
  Number(head);
  return true;
}
