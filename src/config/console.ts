/**
 * The web console's section (`console`): its address, invites by email, sessions, the limits on
 * password sign-ins, and sign-in with the company's OpenID Connect provider.
 */
import { z } from 'zod';
import { count, host, hostName, milliseconds } from './parts';

/**
 * Invites by email: a person an owner adds gets their one-time set-password link in their own
 * mailbox, so it never passes through the inviter. Absent: the answer carries the link.
 */
const smtp = z
  .strictObject({
    host,
    port: z.number().int().min(1).max(65535),
    /** true: TLS from the first byte (port 465); false: plain, upgraded by STARTTLS when the server offers it. */
    secure: z.boolean().default(false),
    /** The sender, `invites@example.com` or `chatgate <invites@example.com>`. */
    from: z.string().min(3).max(320).regex(/^[^\r\n]*@[^\r\n]*$/, 'must be an email address, or a name and <address>, on one line'),
    user: z.string().min(1).optional(),
    /** The environment variable holding the SMTP password (never the password itself in this file). */
    passwordEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name').optional(),
  })
  .refine((smtp) => (smtp.user === undefined) === (smtp.passwordEnv === undefined), { message: 'user and passwordEnv go together (both, or neither)', path: ['passwordEnv'] })
  .optional();

/**
 * Password sign-ins per fixed window of windowMs: past maxFailures for one email from one client
 * address, 429 from that address until the window ends; past emailMaxFailures for one email from
 * every address together, one sign-in per windowMs / emailMaxFailures (slowed, never locked).
 */
const signIn = z
  .strictObject({ maxFailures: count.default(5), emailMaxFailures: count.default(20), windowMs: milliseconds.default(900_000) })
  .prefault({})
  .refine((signIn) => signIn.windowMs / signIn.emailMaxFailures >= 1_000, { message: 'windowMs / emailMaxFailures must be at least 1000 (a second per slowed sign-in)', path: ['emailMaxFailures'] });

/** Sign-in with the company's OpenID Connect provider (Keycloak, Okta, Entra ID, Google, Dex...). */
const oidc = z
  .strictObject({
    issuer: z.url().refine((url) => new URL(url).protocol === 'https:', {
      message:
        'must be an https:// URL: OpenID Connect needs HTTPS to the identity provider, so with http:// every sign-in would fail. ' +
        'For a provider whose certificate a private CA signed, keep https:// and trust that CA: start chatgate with NODE_EXTRA_CA_CERTS=/path/ca.pem',
    }),
    clientId: z.string().min(1),
    /** The environment variable holding the client secret (never the secret itself in this file). */
    clientSecretEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name'),
    scopes: z.array(z.string().min(1)).default(['openid', 'email', 'profile']),
    /** The ID token claim the mappings match: a string or a list of strings (e.g. groups). */
    claim: z.string().min(1).default('groups'),
    /** A claim value -> an account (by name; made if missing) and a role there, or the platform admin role. */
    mappings: z
      .array(
        z.strictObject({
          value: z.string().min(1),
          account: z.string().min(1).optional(),
          role: z.enum(['owner', 'member']).default('member'),
          admin: z.boolean().default(false),
        }),
      )
      .default([]),
  })
  .optional();

/** The web console on the public listener, where account owners and members manage their keys. */
export const consoleSection = z
  .strictObject({
    enabled: z.boolean().default(true),
    /** The console's origin as people reach it (behind a proxy that changes the host); absent: https:// and the request's Host. */
    publicUrl: z.url({ protocol: /^https$/, error: 'must be an https:// URL' }).optional(),
    /**
     * Without publicUrl, the host names (any port) whose Host header may make the OIDC redirect
     * address, besides `localhost` and listen.host; any other Host gets 400 and no redirect.
     */
    allowedHosts: z.array(hostName).default([]),
    smtp,
    session: z.strictObject({ idleMs: milliseconds.default(3_600_000), absoluteMs: milliseconds.default(43_200_000) }).prefault({}),
    signIn,
    oidc,
  })
  .prefault({});
