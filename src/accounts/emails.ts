/**
 * Pure: a person's email as chatgate keys it, or undefined when it is not one.
 *
 * Trimmed, and ASCII letters (A-Z) lower-cased; nothing else is changed. Never Unicode lower-casing,
 * case folding or NFKC: those turn look-alikes into real addresses (the Kelvin sign U+212A becomes
 * `k`, so `\u212Aim@x.test` would become `kim@x.test` and sign in as Kim), and two different mailboxes
 * must never key one person. `isNfkcStable` tells whether an email is such a look-alike.
 */
const SHAPE = /^[^\s@]+@[^\s@]+$/;
const MAX_LENGTH = 254;

export function normalizeEmail(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const email = value.trim().replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this refuses
  return email.length <= MAX_LENGTH && SHAPE.test(email) && !/[\u0000-\u001f\u007f]/.test(email) ? email : undefined;
}

/**
 * Whether NFKC leaves the email as it is. One that changes (a Kelvin sign, full-width letters, a
 * ligature...) imitates another address: it must never be linked to a person by its email.
 */
export function isNfkcStable(email: string): boolean {
  return email.normalize('NFKC') === email;
}
