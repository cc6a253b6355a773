/**
 * Pure: may a key use a model? A key lists globs over `<provider>/<model_name>`: `*` matches any run
 * of characters (slashes included, so `vllm/*` covers `vllm/meta-llama/Llama-3.1-8B`), `?` one character.
 * An empty list means every model.
 */
export function modelAllowed(globs: readonly string[], model: string): boolean {
  if (globs.length === 0) return true;
  return globs.some((glob) => globMatches(glob, model));
}

export function globMatches(glob: string, text: string): boolean {
  // Iterative wildcard match with single backtracking point: linear in practice, no regex built from input.
  let g = 0;
  let t = 0;
  let starG = -1;
  let starT = 0;
  while (t < text.length) {
    if (g < glob.length && (glob[g] === '?' || glob[g] === text[t])) {
      g++;
      t++;
    } else if (g < glob.length && glob[g] === '*') {
      starG = g++;
      starT = t;
    } else if (starG !== -1) {
      g = starG + 1;
      t = ++starT;
    } else {
      return false;
    }
  }
  while (g < glob.length && glob[g] === '*') g++;
  return g === glob.length;
}
