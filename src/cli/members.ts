/**
 * `chatgate members add | list | remove | password-link`: an account's members, and the one-time
 * links that let a person set their password.
 */
import { normalizeEmail } from '../accounts/emails';
import { passwordPath } from '../accounts/service';
import type { Config } from '../config';
import { parse, printable, UsageError } from './flags';
import { OPERATOR, withAccounts } from './operator';

export async function membersCommand(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  const { values } = parse(rest, { config: { type: 'string' }, account: { type: 'string' }, email: { type: 'string' }, role: { type: 'string' }, 'transfer-keys-to': { type: 'string' }, json: { type: 'boolean' } });
  if (action === 'password-link') return passwordLinkCommand(values);
  if (!values.account) throw new UsageError(`members ${action ?? ''} needs --account ID`);
  const account = values.account;
  return withAccounts(values.config, async (accounts, config) => {
    if (action === 'add') {
      if (!values.email || !values.role) throw new UsageError('members add needs --email EMAIL and --role owner|member');
      const { member, person } = await accounts.addMember(account, { email: values.email, role: values.role }, OPERATOR, undefined);
      // Someone without a password gets a one-time link to set it (unless they sign in with the identity provider).
      const link = person.passwordHash === null ? passwordPath(await accounts.passwordLink(person.email, account, OPERATOR, undefined)) : undefined;
      if (values.json) process.stdout.write(`${JSON.stringify({ ...member, ...(link ? { passwordLink: link } : {}) })}\n`);
      else process.stdout.write(`${member.email} is ${member.role} of ${account}${link ? `\nset the password once at ${consoleOrigin(config)}${link}` : ''}\n`);
      return 0;
    }
    if (action === 'list') {
      await accounts.account(account);
      const members = await accounts.store.listMembers(account);
      if (values.json) process.stdout.write(`${JSON.stringify(members)}\n`);
      else for (const m of members) process.stdout.write(`${m.email}\t${m.role}\tadded ${m.addedAt} by ${m.addedBy}\n`);
      return 0;
    }
    if (action === 'remove') {
      if (!values.email) throw new UsageError('members remove needs --email EMAIL');
      const heir = values['transfer-keys-to'];
      const { revoked, transferred } = await accounts.removeMember(account, values.email, OPERATOR, undefined, heir);
      process.stdout.write(`${values.email} removed from ${account}; ${heir ? `${transferred} of their keys now belong to ${heir}` : `${revoked} of their keys revoked`}\n`);
      return 0;
    }
    throw new UsageError(`unknown members action '${action ?? ''}'`);
  });
}

/** A one-time link for a person to set their password (admin@localhost's after the first start; a lost one); it voids older ones. */
async function passwordLinkCommand(values: { config?: string; email?: string; account?: string; json?: boolean }): Promise<number> {
  if (!values.email) throw new UsageError('members password-link needs --email EMAIL');
  const email = normalizeEmail(values.email);
  if (!email) throw new UsageError(`--email ${printable(values.email)} is not an email address`);
  return withAccounts(values.config, async (accounts, config) => {
    if (values.account !== undefined) {
      await accounts.account(values.account);
      if (!(await accounts.store.listMembers(values.account)).some((m) => m.email === email)) throw new UsageError(`${email} is not a member of ${values.account}`);
    }
    const token = await accounts.passwordLink(email, values.account ?? null, OPERATOR, undefined);
    const link = `${consoleOrigin(config)}${passwordPath(token)}`;
    if (values.json) process.stdout.write(`${JSON.stringify({ email, path: passwordPath(token), url: link })}\n`);
    else process.stdout.write(`${link}\n(a one-time link for ${email} to set their password: it works once, for a week, and voids older links)\n`);
    return 0;
  });
}

/** The console's origin as people reach it: console.publicUrl, else https:// and the listen address. */
function consoleOrigin(config: Config): string {
  if (config.console.publicUrl) return new URL(config.console.publicUrl).origin;
  const host = ['0.0.0.0', '::'].includes(config.listen.host) ? 'localhost' : config.listen.host;
  return `https://${host.includes(':') ? `[${host}]` : host}:${config.listen.port}`;
}
