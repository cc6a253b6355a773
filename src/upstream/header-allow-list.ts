/**
 * Which client request headers a provider's workers get: the names in its `forwardHeaders` (a
 * trailing `*` matches a prefix), never one the gateway sets itself or a credential, whatever a
 * prefix would match. Built once per provider; `allows` runs for each header of each request.
 */
import { NEVER_FORWARDED } from '../config';

const NEVER: ReadonlySet<string> = new Set(NEVER_FORWARDED);

export class HeaderAllowList {
  private readonly exact: ReadonlySet<string>;
  private readonly prefixes: readonly string[];

  constructor(patterns: readonly string[]) {
    this.exact = new Set(patterns.filter((pattern) => !pattern.endsWith('*') && !NEVER.has(pattern)));
    this.prefixes = patterns.filter((pattern) => pattern.endsWith('*')).map((pattern) => pattern.slice(0, -1));
  }

  /** `name` in lower case, as Node gives request header names. */
  allows(name: string): boolean {
    if (this.exact.has(name)) return true;
    for (const prefix of this.prefixes) if (name.startsWith(prefix)) return !NEVER.has(name);
    return false;
  }
}
