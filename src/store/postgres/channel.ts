/** The NOTIFY channel key changes are announced on (its trigger is in the migrations). */
export const CHANNEL = 'chatgate_keys';
