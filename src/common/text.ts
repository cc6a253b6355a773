/** Strict UTF-8: malformed bytes are an answerable client error, never silently replaced. */
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

export function decodeUtf8Strict(bytes: Uint8Array): string | undefined {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return undefined;
  }
}
