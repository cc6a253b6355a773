/**
 * A GET of a small JSON document from a party we do not run (GitHub's published keys, an issuer's
 * discovery document and JWKS): a deadline measured here, no redirect followed, and at most
 * `maxBytes` read, so a slow, redirecting or endless answer costs a bounded wait and memory.
 * Errors name the URL and what went wrong, never the body.
 */
export async function fetchBoundedText(url: string, maxBytes: number, timeoutMs: number): Promise<string> {
  const response = await fetch(url, { headers: { accept: 'application/json' }, redirect: 'error', signal: AbortSignal.timeout(timeoutMs) });
  if (!response.ok) {
    await response.body?.cancel();
    throw new Error(`${url} answered ${response.status}`);
  }
  const declared = Number(response.headers.get('content-length') ?? 0);
  if (declared > maxBytes) {
    await response.body?.cancel();
    throw new Error(`${url} sent more than ${maxBytes} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  const reader = response.body?.getReader();
  for (let read = await reader?.read(); reader && read && !read.done; read = await reader.read()) {
    size += read.value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      throw new Error(`${url} sent more than ${maxBytes} bytes`);
    }
    chunks.push(Buffer.from(read.value));
  }
  return Buffer.concat(chunks).toString('utf8');
}
