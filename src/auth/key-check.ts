/**
 * `chatgate keys check`: what a string is, offline (no store, no config): a well-formed key of
 * today's form (its checksum holds), one of the old form (no checksum to check), or not a key, and
 * why. The verdict never repeats the string.
 */
import { keyForm, type KeyForm } from '../common/key-shape';

const VERDICTS: Record<KeyForm, string> = {
  checksummed: 'a well-formed chatgate key: its checksum holds (whether it is live, only the gateway knows)',
  legacy: 'a well-formed chatgate key of the form made before checksums (cgk_ and 43 base64url characters): nothing to check offline',
  'bad-checksum': 'not a chatgate key: shaped like one, but its checksum does not hold (mistyped, cut, or made up)',
  'not-a-key': 'not a chatgate key: a key is cgk_ followed by 49 letters and digits',
};

export function keyVerdict(candidate: string): { wellFormed: boolean; text: string } {
  const form = keyForm(candidate);
  return { wellFormed: form === 'checksummed' || form === 'legacy', text: VERDICTS[form] };
}
