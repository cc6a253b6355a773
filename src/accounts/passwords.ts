/**
 * Passwords for installs without an identity provider: stored only as a slow, salted scrypt hash
 * (node:crypto; N = 2^15, r = 8, p = 1: about 50 ms and 32 MiB a check, OWASP's recommended minimum),
 * in a self-describing string so the cost can be raised later without breaking stored hashes.
 *
 * scrypt runs on libuv's thread pool (4 threads unless UV_THREADPOOL_SIZE says otherwise), which the
 * file store's reads and writes and DNS share: unbounded, a flood of sign-ins would hold every thread
 * and starve the API-key path. So every hash in this process waits its turn, HASHING_AT_ONCE at a
 * time; a sign-in reserves its place first and, with HASHING_QUEUE already waiting, is refused at
 * once (429 sign_in_busy) before it costs a store write.
 */
import { randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/** scrypt computations running at once in a process: two of libuv's four threads stay free for file I/O. */
export const HASHING_AT_ONCE = 2;
/** Sign-ins that may wait for a turn (about 16 x 50 ms / 2 = 0.4 s at most); past it, 429 at once. */
export const HASHING_QUEUE = 16;

/** A place reserved for one password check: used once by `verifyPassword`, or released unused. */
export interface HashingTurn {
  /** Gives the place back unused (nothing when it was used or released already). */
  release(): void;
  /** Runs the work in this place, once. */
  run<T>(work: () => Promise<T>): Promise<T>;
}

/**
 * Pure bookkeeping of turns: at most `atOnce` pieces of work run, the rest wait in order. A reserved
 * place counts as waiting from the moment it is reserved, so that admission is decided at once.
 */
export class HashingQueue {
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  private reserved = 0;

  constructor(
    readonly atOnce: number,
    readonly queue: number,
  ) {}

  /** Running, waiting and reserved work. */
  get load(): number {
    return this.running + this.waiting.length + this.reserved;
  }

  /** A place for one piece of work, or undefined when `atOnce + queue` are taken. */
  reserve(): HashingTurn | undefined {
    if (this.load >= this.atOnce + this.queue) return undefined;
    this.reserved++;
    let held = true;
    const giveBack = () => {
      if (!held) return false;
      held = false;
      this.reserved--;
      return true;
    };
    return {
      release: () => void giveBack(),
      run: <T>(work: () => Promise<T>) => {
        if (!giveBack()) return Promise.reject(new Error('a hashing turn is used once'));
        return this.run(work);
      },
    };
  }

  /** Runs the work in its turn (waiting, however many wait: for callers already let in). */
  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.running < this.atOnce) this.running++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = this.waiting.shift();
      if (next) next(); // the turn passes on: `running` stays as it is
      else this.running--;
    }
  }
}

const hashing = new HashingQueue(HASHING_AT_ONCE, HASHING_QUEUE);

/** A place for one sign-in's password check, or undefined when too many wait already. */
export function reserveHashing(): HashingTurn | undefined {
  return hashing.reserve();
}

const scryptNow = (password: string, salt: Buffer, length: number, options: ScryptOptions) =>
  new Promise<Buffer>((resolve, reject) => scryptCallback(password, salt, length, options, (err, key) => (err ? reject(err) : resolve(key))));
const scrypt = (password: string, salt: Buffer, length: number, options: ScryptOptions, turn?: HashingTurn) =>
  (turn ?? hashing).run(() => scryptNow(password, salt, length, options));

const COST = { N: 2 ** 15, r: 8, p: 1 };
const KEY_LENGTH = 32;
/** scrypt needs 128 * N * r bytes; Node's default cap (32 MiB) is exactly that for these parameters. */
const MAX_MEMORY = 64 * 1024 * 1024;

export const MIN_PASSWORD_LENGTH = 12;
export const MAX_PASSWORD_LENGTH = 1024;

/** Why a new password cannot be used (the end of a sentence), or undefined. */
export function passwordProblem(password: unknown): string | undefined {
  if (typeof password !== 'string') return 'must be a string';
  if (password.length < MIN_PASSWORD_LENGTH) return `must be at least ${MIN_PASSWORD_LENGTH} characters`;
  if (password.length > MAX_PASSWORD_LENGTH) return `must be at most ${MAX_PASSWORD_LENGTH} characters`;
  return undefined;
}

/** `scrypt$N$r$p$<salt>$<hash>`, base64url. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scrypt(password, salt, KEY_LENGTH, { ...COST, maxmem: MAX_MEMORY });
  return ['scrypt', COST.N, COST.r, COST.p, salt.toString('base64url'), hash.toString('base64url')].join('$');
}

/**
 * Constant time in the hash compared; false for a stored value that is not a hash of ours. With a
 * turn (from reserveHashing), the check runs in that turn; without, it waits for one.
 */
export async function verifyPassword(password: string, stored: string, turn?: HashingTurn): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !hash) {
    turn?.release();
    return false;
  }
  const expected = Buffer.from(hash, 'base64url');
  const actual = await scrypt(password, Buffer.from(salt, 'base64url'), expected.length, { N: Number(n), r: Number(r), p: Number(p), maxmem: MAX_MEMORY }, turn);
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

/**
 * A hash of a password nobody has: checked when an email is unknown (or has no password), so that a
 * refusal takes as long whether or not the email exists.
 */
let decoy: Promise<string> | undefined;
export function decoyHash(): Promise<string> {
  decoy ??= hashPassword(randomBytes(32).toString('base64url'));
  return decoy;
}
