/** Pure: a person's email as chatgate keys it (trimmed, lower case), or why it is not one. */
const SHAPE = /^[^\s@]+@[^\s@]+$/;
const MAX_LENGTH = 254;

export function normalizeEmail(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const email = value.trim().toLowerCase();
  return email.length <= MAX_LENGTH && SHAPE.test(email) && !/[\u0000-\u001f\u007f]/.test(email) ? email : undefined;
}
