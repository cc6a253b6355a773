/**
 * A package that is ESM only (openid-client, jose), loaded from this CommonJS project with a real
 * import(): TypeScript, compiling to CommonJS, would rewrite a written one into require(). Resolved
 * from this file (not from the working directory), imported once, and only when first asked for.
 */
import { pathToFileURL } from 'node:url';

const importModule = new Function('specifier', 'return import(specifier)') as (specifier: string) => Promise<unknown>;
const loaded = new Map<string, Promise<unknown>>();

export function importEsm<T>(name: string): Promise<T> {
  let module = loaded.get(name);
  if (!module) {
    module = importModule(pathToFileURL(require.resolve(name)).href);
    loaded.set(name, module);
  }
  return module as Promise<T>;
}
