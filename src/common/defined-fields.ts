/** Pure: the fields of `values` that are not undefined, so spreading them over defaults keeps the defaults. */
export function definedFields<T extends object>(values: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(values ?? {}).filter(([, value]) => value !== undefined)) as Partial<T>;
}
