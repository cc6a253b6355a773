/**
 * A GET of a small JSON document from a party we do not run (GitHub's published keys, an issuer's
 * discovery document and JWKS): a deadline measured here for the whole of it (headers and body: a
 * server that trickles bytes is cut at the deadline too), no redirect followed, and at most
 * `maxBytes` read, so a slow, redirecting or endless answer costs a bounded wait and memory.
 * Errors name the URL and what went wrong, never the body.
 *
 * The deadline is a timer of our own, held until the fetch ends: an AbortSignal.timeout() that
 * nothing references may be collected before it fires (Node 20), and a body being read then never ends.
 */
export async function fetchBoundedText(url: string, maxBytes: number, timeoutMs: number): Promise<string> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = new Error(`${url} did not answer within ${timeoutMs} ms`);
      controller.abort(error);
      reject(error);
    }, timeoutMs);
  });
  deadline.catch(() => undefined); // rejected after the fetch ended: nobody waits for it any more
  try {
    const response = await Promise.race([fetch(url, { headers: { accept: 'application/json' }, redirect: 'error', signal: controller.signal }), deadline]);
    const cancel = () => response.body?.cancel().catch(() => undefined);
    if (!response.ok) {
      void cancel();
      throw new Error(`${url} answered ${response.status}`);
    }
    if (Number(response.headers.get('content-length') ?? 0) > maxBytes) {
      void cancel();
      throw new Error(`${url} sent more than ${maxBytes} bytes`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const reader = response.body?.getReader();
    try {
      for (let read = reader && (await Promise.race([reader.read(), deadline])); reader && read && !read.done; read = await Promise.race([reader.read(), deadline])) {
        size += read.value.byteLength;
        if (size > maxBytes) throw new Error(`${url} sent more than ${maxBytes} bytes`);
        chunks.push(Buffer.from(read.value));
      }
    } catch (err) {
      reader?.cancel().catch(() => undefined);
      throw err;
    }
    return Buffer.concat(chunks).toString('utf8');
  } finally {
    clearTimeout(timer);
  }
}
