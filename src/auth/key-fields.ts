/**
 * Pure: what a key's own fields may hold, for every way they are set (the admin API, the CLI).
 * A name is shown in lists and logs: control characters (a newline, an ANSI escape) and Unicode's
 * direction overrides could forge rows in `keys list` or a terminal, so they are refused. A limit is
 * stored in a PostgreSQL integer column and used as a count: it is a whole number up to 2^31 - 1.
 */
export const MAX_NAME_LENGTH = 200;
export const MAX_LIMIT = 2_147_483_647;

// C0 and C1 controls, DEL, and the bidirectional embeddings, overrides and isolates.
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

/** Why a name cannot be used (as the end of a sentence starting with its field name), or undefined when it can. */
export function nameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string' || name.trim() === '' || name.length > MAX_NAME_LENGTH) return `must be a non-empty string of at most ${MAX_NAME_LENGTH} characters`;
  if (UNPRINTABLE.test(name)) return 'must not hold control characters or text direction overrides';
  return undefined;
}

/** Whether a limit can be stored: a whole number from 0 (no limit) to MAX_LIMIT. */
export function limitAllowed(value: number): boolean {
  return Number.isInteger(value) && value >= 0 && value <= MAX_LIMIT;
}
