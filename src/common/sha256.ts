/** SHA-256 of a text as hex: how keys, session tokens and one-time tokens are kept in the stores. */
import crypto from 'node:crypto';

/** crypto.hash, one call without a Hash object, takes a third of createHash's time; Node < 20.12 lacks it. */
export const sha256Hex: (text: string) => string =
  typeof crypto.hash === 'function' ? (text) => crypto.hash('sha256', text, 'hex') : (text) => crypto.createHash('sha256').update(text, 'utf8').digest('hex');
