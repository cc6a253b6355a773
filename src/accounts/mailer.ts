/**
 * Invitations by email (console.smtp): the one-time link to set a password goes over SMTP to the
 * invitee's own mailbox, so it never passes through the person who invited them (who could otherwise
 * set the password themself and sign in as the invitee later). nodemailer speaks SMTP: TLS from the
 * first byte (`secure`), or STARTTLS whenever the server offers it, with the system's trusted CAs.
 *
 * The link is absolute: console.publicUrl's origin, else https:// and the request's Host, but only a
 * Host the operator trusts (localhost, listen.host, console.allowedHosts: the rule of the sign-in
 * redirect, oidc.ts redirectOrigin). Any other Host would let a request mail the invitee a link to
 * another site, which would read the token from it.
 */
import nodemailer from 'nodemailer';
import { ConfigError, type Config } from '../config';

export type SmtpSettings = NonNullable<Config['console']['smtp']>;

export interface Invitation {
  to: string;
  /** The absolute set-password link. */
  link: string;
  accountName: string;
  invitedBy: string;
}

export interface Mailer {
  /** Resolves once the SMTP server took the mail; rejects (with no part of the link in the error) when it did not. */
  sendInvite(invitation: Invitation): Promise<void>;
  close(): void;
}

/** A mailer over console.smtp; throws ConfigError when passwordEnv names an unset variable. */
export function createMailer(settings: SmtpSettings, env: NodeJS.ProcessEnv = process.env): Mailer {
  let pass: string | undefined;
  if (settings.passwordEnv !== undefined) {
    pass = env[settings.passwordEnv];
    if (!pass) throw new ConfigError(`config console.smtp.passwordEnv: environment variable ${settings.passwordEnv} is not set`);
  }
  const transport = nodemailer.createTransport({
    host: settings.host,
    port: settings.port,
    secure: settings.secure,
    ...(settings.user !== undefined ? { auth: { user: settings.user, pass: pass! } } : {}),
    connectionTimeout: 10_000,
    greetingTimeout: 10_000,
    socketTimeout: 20_000,
    // Only what we give it goes into a mail: no file or URL contents.
    disableFileAccess: true,
    disableUrlAccess: true,
  });
  return {
    async sendInvite({ to, link, accountName, invitedBy }) {
      try {
        await transport.sendMail({
          from: settings.from,
          to,
          subject: `You are invited to ${accountName} on chatgate`,
          text: [
            `${invitedBy} added you to the account '${accountName}' on chatgate.`,
            '',
            'Set your password with this link (it works once, for a week; a newer link voids it):',
            link,
            '',
            'If you did not expect this, ignore this mail: nothing happens until the link is used.',
            '',
          ].join('\n'),
        });
      } catch (err) {
        // nodemailer's errors name the server's answer, never the mail's text; cut short all the same.
        throw new Error(`the SMTP server did not take the invitation: ${String((err as Error).message).slice(0, 160)}`);
      }
    },
    close: () => transport.close(),
  };
}
