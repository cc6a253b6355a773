/**
 * `chatgate keys create | list | revoke | rotate | check`: a store's keys, through the admin API's
 * service (audited as `cli`); `check` reads a string offline, without the store.
 */
import { publicView } from '../auth/issue';
import { keyVerdict } from '../auth/key-check';
import { nameProblem, parseCidr } from '../auth/key-fields';
import { defaultAccountId } from '../store/default-account';
import { BUDGET_FLAGS, budgetOf, endpointList, graceSeconds, limitValue, parse, parseExpiry, printable, UsageError } from './flags';
import { OPERATOR, withAccounts } from './operator';

export async function keys(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  const { values, positionals } = parse(
    rest,
    {
      config: { type: 'string' },
      name: { type: 'string' },
      account: { type: 'string' },
      models: { type: 'string', multiple: true },
      endpoints: { type: 'string', multiple: true },
      'allowed-ips': { type: 'string', multiple: true },
      expires: { type: 'string' },
      rpm: { type: 'string' },
      tpm: { type: 'string' },
      'max-concurrent': { type: 'string' },
      'grace-seconds': { type: 'string' },
      ...BUDGET_FLAGS,
      json: { type: 'boolean' },
    },
    true,
  );
  if (action === 'check') return checkKey(positionals);
  return withAccounts(values.config, async (accounts) => {
    const store = accounts.store;
    if (action === 'create') {
      if (!values.name) throw new UsageError('keys create needs --name NAME');
      const problem = nameProblem(values.name);
      if (problem) throw new UsageError(`--name ${problem}`);
      const expiresAt = values.expires === undefined ? null : parseExpiry(values.expires).toISOString();
      const limit = (flag: string, text: string | undefined) => (text === undefined ? null : limitValue(flag, text));
      const rateLimit = {
        requestsPerMinute: limit('--rpm', values.rpm),
        tokensPerMinute: limit('--tpm', values.tpm),
        maxConcurrent: limit('--max-concurrent', values['max-concurrent']),
      };
      if (values.account !== undefined && !(await store.getAccount(values.account))) throw new UsageError(`no account has the id ${values.account} (chatgate accounts list)`);
      const endpoints = endpointList(values.endpoints ?? []);
      const allowedIps = (values['allowed-ips'] ?? []).flatMap((entry) => entry.split(',')).map((entry) => {
        const cidr = parseCidr(entry);
        if (!cidr) throw new UsageError(`--allowed-ips ${entry}: not an IP address or CIDR range (such as 10.0.0.0/8 or 2001:db8::/32)`);
        return cidr;
      });
      const accountId = values.account ?? (await defaultAccountId(store));
      const { key, record } = await accounts.createKey(accountId, { name: values.name, models: values.models ?? [], endpoints, allowedIps, expiresAt, rateLimit, budget: budgetOf(values) }, OPERATOR, undefined);
      if (values.json) process.stdout.write(`${JSON.stringify({ ...publicView(record), key })}\n`);
      else process.stdout.write(`${key}\n(id ${record.id}; this key is shown once: the store keeps only its digest)\n`);
      return 0;
    }
    if (action === 'list') {
      const records = (await store.list(values.account)).map(publicView);
      if (values.json) process.stdout.write(`${JSON.stringify(records)}\n`);
      else for (const r of records) process.stdout.write(`${r.id}\t${r.prefix}…\t${printable(r.name)}\t${r.revokedAt ? 'revoked' : r.expiresAt && Date.parse(r.expiresAt) <= Date.now() ? 'expired' : 'active'}\t${r.models.join(',') || '*'}\tlast used ${r.lastUsedAt ?? 'never'}\n`);
      return 0;
    }
    if (action === 'revoke') {
      const id = positionals[0];
      if (!id) throw new UsageError('keys revoke needs the key id');
      const revoked = await accounts.revokeKey(await accounts.key(id, undefined), OPERATOR, undefined);
      process.stdout.write(`revoked ${revoked.id} (${printable(revoked.name)}); running gateways refuse it within a second (PostgreSQL: at once)\n`);
      return 0;
    }
    if (action === 'rotate') {
      const id = positionals[0];
      if (!id) throw new UsageError('keys rotate needs the key id');
      const rotated = await accounts.rotateKey(await accounts.key(id, undefined), OPERATOR, undefined, graceSeconds(values['grace-seconds']));
      const view = publicView(rotated.record);
      if (values.json) process.stdout.write(`${JSON.stringify({ ...view, key: rotated.key })}\n`);
      else process.stdout.write(`${rotated.key}\n(id ${id}: same settings, new secret; the old one ${view.previousKeyExpiresAt ? `keeps working until ${view.previousKeyExpiresAt}` : 'stops working'})\n`);
      return 0;
    }
    throw new UsageError(`unknown keys action '${action ?? ''}'`);
  });
}

/** `keys check`: what a string is, offline (auth/key-check.ts); `-` reads it from stdin, out of the shell's history. */
async function checkKey(positionals: string[]): Promise<number> {
  if (positionals.length !== 1) throw new UsageError('keys check needs one STRING (or - to read it from stdin)');
  let candidate = positionals[0]!;
  if (candidate === '-') {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    candidate = Buffer.concat(chunks).toString('utf8').trim();
  }
  const verdict = keyVerdict(candidate);
  process.stdout.write(`${verdict.text}\n`);
  return verdict.wellFormed ? 0 : 1;
}
