/**
 * A stream's head is sent before its first event, and the copy Node keeps is made flat.
 *
 * Node holds an answer's head until the first write of its body; a stream's first event may be
 * seconds away (the model is still reading the prompt). Sent at once, the client knows its stream
 * started, and the head travels in a TLS record of its own: written together with the first events it
 * can pass the 1 KiB Node's TLS output buffer starts with, and the 16 KiB buffer Node then adds stays
 * as long as the connection (8-9 KiB more per open stream in the benchmark, on Node 20).
 *
 * Node keeps the head (`_header`: status line and header lines) as long as the answer lasts, in the
 * form it built it by concatenation: a tree of some fifty strings, about 1.2 KiB an open stream. Read
 * as a number, the head is flattened by V8 in place into one string, and the tree is let go
 * (test/upstream/stream-memory.test.ts reads it in a heap snapshot of an open stream).
 */
import type { ServerResponse } from 'node:http';

export function sendStreamHead(res: ServerResponse): void {
  res.flushHeaders();
  Number((res as { _header?: unknown })._header);
}
