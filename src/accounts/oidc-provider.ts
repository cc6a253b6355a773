/**
 * The identity provider, as the OIDC sign-in (oidc.ts) talks to it through openid-client: discovered
 * on first use, the client authenticated as the provider offers; what it says about a person (the ID
 * token's claims, and userinfo's for what they lack); the pure rule on linking a first sign-in to a
 * person by email; and how a failed exchange is told apart and described (never with its data).
 *
 * openid-client is ESM only and this project is CommonJS: it is loaded, only when OIDC is configured,
 * with import(), which TypeScript (module node16) leaves as Node's own. Only types come from it at
 * compile time.
 */
import type { Config } from '../config';
import { errors } from '../errors';
import type { Logger } from '../telemetry/log';
import type { IdentityRecord } from '../store/types';

export type OidcSettings = NonNullable<Config['console']['oidc']>;

/** Each request to the provider (discovery, token, JWKS, userinfo) gives up after this long, in seconds. */
const PROVIDER_TIMEOUT_SECONDS = 10;

/** What the provider says about the person: from the ID token and, for what it lacks, userinfo. */
export interface Said {
  issuer: string;
  subject: string;
  email: unknown;
  /** As sent, next to the email it speaks of (both from the ID token, or both from userinfo). */
  emailVerified: unknown;
  /** The mapped claim's values. */
  values: string[];
}

/** openid-client's types, named as the import() below loads it (this module is CommonJS). */
export type Library = typeof import('openid-client', { with: { 'resolution-mode': 'import' } });
type Configuration = import('openid-client', { with: { 'resolution-mode': 'import' } }).Configuration;
type TokenEndpointResponse = import('openid-client', { with: { 'resolution-mode': 'import' } }).TokenEndpointResponse;
type TokenEndpointResponseHelpers = import('openid-client', { with: { 'resolution-mode': 'import' } }).TokenEndpointResponseHelpers;
export interface Connected {
  lib: Library;
  config: Configuration;
}
/**
 * The provider's metadata, discovered on first use and kept; a failed discovery is tried again on the
 * next sign-in. The client authenticates with client_secret_basic, unless the provider offers only
 * client_secret_post.
 */
export class IdentityProvider {
  private connecting: Promise<Connected> | undefined;

  constructor(
    private readonly settings: OidcSettings,
    private readonly clientSecret: string,
    private readonly log: Logger,
  ) {}

  connected(): Promise<Connected> {
    this.connecting ??= this.connect().catch((err: unknown) => {
      this.connecting = undefined;
      this.log.warn({ issuer: this.settings.issuer, reason: reasonOf(err) }, 'OIDC: the identity provider could not be discovered; trying again on the next sign-in');
      throw errors.identityProviderUnavailable();
    });
    return this.connecting;
  }

  private async connect(): Promise<Connected> {
    const lib = await loadOpenIdClient();
    const { issuer, clientId } = this.settings;
    const discovered = await lib.discovery(new URL(issuer), clientId, this.clientSecret, undefined, { timeout: PROVIDER_TIMEOUT_SECONDS });
    const metadata = discovered.serverMetadata();
    const methods = metadata.token_endpoint_auth_methods_supported;
    const basic = !methods || methods.includes('client_secret_basic') || !methods.includes('client_secret_post');
    const config = new lib.Configuration(metadata, clientId, this.clientSecret, basic ? lib.ClientSecretBasic(this.clientSecret) : lib.ClientSecretPost(this.clientSecret));
    config.timeout = PROVIDER_TIMEOUT_SECONDS;
    lib.enableNonRepudiationChecks(config); // the ID token's signature is checked against the provider's JWKS
    this.log.info({ issuer: metadata.issuer, clientAuth: basic ? 'client_secret_basic' : 'client_secret_post' }, 'OIDC: identity provider discovered');
    return { lib, config };
  }
}

/** openid-client, imported when OIDC is first used (Node keeps the module: once). */
function loadOpenIdClient(): Promise<Library> {
  return import('openid-client');
}

/**
 * What the provider says: the ID token's claims and, when it lacks the email or the mapped claim, the
 * userinfo endpoint's (with the access token; openid-client checks its `sub` is the ID token's). The
 * email and email_verified are taken together from where the email is.
 */
export async function claimsOf(lib: Library, config: Configuration, tokens: TokenEndpointResponse & TokenEndpointResponseHelpers, claim: string): Promise<Said> {
  const idToken = tokens.claims()!;
  let userinfo: Record<string, unknown> = {};
  const lacking = idToken.email === undefined || claimOf(idToken, claim) === undefined;
  if (lacking && config.serverMetadata().userinfo_endpoint && tokens.access_token) {
    userinfo = await lib.fetchUserInfo(config, tokens.access_token, idToken.sub);
  }
  const emailFrom = idToken.email !== undefined ? idToken : userinfo;
  return {
    issuer: idToken.iss,
    subject: idToken.sub,
    email: emailFrom.email,
    emailVerified: emailFrom.email_verified,
    values: claimValues(claimOf(idToken, claim) !== undefined ? idToken : userinfo, claim),
  };
}

/**
 * Pure: why a first sign-in may not be linked by its email to the person here who has it, or
 * undefined when it may. Only the boolean `email_verified: true` counts: a provider that sends a
 * string ("true", "no") or null does not follow the standard, and is not trusted to have checked the
 * mailbox. `otherSubject`: the person is bound to another subject of this issuer.
 */
export function linkRefusal(said: Pick<Said, 'issuer' | 'emailVerified'>, identities: readonly IdentityRecord[]): { reason: string; otherSubject: boolean } | undefined {
  if (said.emailVerified !== true) {
    return { reason: `the identity provider does not say this email is verified (email_verified is ${describeClaim(said.emailVerified)}, not true), and a person here has it`, otherSubject: false };
  }
  if (identities.some((identity) => identity.issuer === said.issuer)) {
    return { reason: 'a person with this email is bound to another subject of this identity provider', otherSubject: true };
  }
  return undefined;
}

/** A claim's value as it is written in the log: its JSON, short (never a token: this is email_verified). */
export function describeClaim(value: unknown): string {
  return value === undefined ? 'missing' : String(JSON.stringify(value)).slice(0, 40);
}

/** The claim's value: at its name, or (a name with dots) reached into objects (realm_access.roles). */
function claimOf(claims: Record<string, unknown>, name: string): unknown {
  const value: unknown = claims[name];
  if (value !== undefined || !name.includes('.')) return value;
  return name.split('.').reduce<unknown>((at, part) => (at !== null && typeof at === 'object' && !Array.isArray(at) ? (at as Record<string, unknown>)[part] : undefined), claims);
}

/** The claim's values: a string, or the strings of a list; a name with dots may reach into objects (realm_access.roles). */
export function claimValues(claims: Record<string, unknown>, name: string): string[] {
  const value = claimOf(claims, name);
  if (typeof value === 'string') return [value];
  return Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : [];
}

/** Whether the provider could not be reached at all (no answer, or a timeout), as opposed to refusing. */
export function unreachable(err: unknown): boolean {
  for (let at = err, depth = 0; at instanceof Error && depth < 5; at = at.cause, depth++) {
    if (at.name === 'TimeoutError' || at.name === 'AbortError' || (at as { code?: unknown }).code === 'OAUTH_TIMEOUT') return true;
    if (at instanceof TypeError && at.message === 'fetch failed') return true;
  }
  const response = err instanceof Error ? err.cause : undefined;
  return response instanceof Response && response.status >= 500;
}

/**
 * Why an exchange failed, for the log and the audit trail: the messages of the error and its causes
 * (openid-client's are fixed texts), and the provider's error code; never the error's data, which
 * can hold the response or the token's claims.
 */
export function reasonOf(err: unknown): string {
  const parts: string[] = [];
  for (let at = err, depth = 0; at instanceof Error && depth < 4; at = at.cause, depth++) {
    const { code, error, error_description: description } = at as { code?: unknown; error?: unknown; error_description?: unknown };
    parts.push([at.message, typeof code === 'string' ? `(${code})` : '', typeof error === 'string' ? `${error}${typeof description === 'string' ? `: ${description}` : ''}` : ''].filter(Boolean).join(' '));
  }
  return parts.length > 0 ? parts.join(' <- ').slice(0, 500) : String(err).slice(0, 200);
}
