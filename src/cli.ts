#!/usr/bin/env node
/**
 * `chatgate`: serve | keys | accounts | members | store | mock-worker. Exit codes: 0 done, 1 failed, 2 usage.
 * The key, account and member commands work on the config's store with a platform admin's rights,
 * through the admin API's service: every change leaves the same audit event, by the actor `cli`.
 */
import { publicView } from './auth/issue';
import { nameProblem, parseCidr } from './auth/key-fields';
import { Auditor } from './accounts/audit';
import { Accounts, passwordPath } from './accounts/service';
import { normalizeEmail } from './accounts/emails';
import { createLogger } from './telemetry/log';
import { importIntoStore, openKeyStore } from './store/open';
import { configFileFrom, ConfigError, loadConfig, type Config } from './config';
import { defaultAccountId } from './store/default-account';
import { turnOffPretenuring } from './tuning/pretenuring';
import { keyVerdict } from './auth/key-check';
import { whenNpmParentGone } from './process/parent-watch';
import type { Gateway } from './process/startup';
import { BUDGET_FLAGS, budgetOf, endpointList, graceSeconds, limitValue, parse, parseExpiry, positiveNumber, printable, quotaValue, UsageError, wholeNumber } from './cli/flags';

// Each command loads only what it needs: `keys` and `mock-worker` start fast without the gateway's stack.
const gateway = () => import('./main.js');

const USAGE = `Usage:
  chatgate serve [--config FILE]
  chatgate keys create --name NAME [--account ID] [--models GLOB]... [--endpoints chat|completions|embeddings|responses]... [--allowed-ips CIDR]... [--expires ISO-8601] [--rpm N] [--tpm N] [--max-concurrent N] [--budget-per-day AMOUNT] [--budget-per-month AMOUNT] [--json] [--config FILE]
  chatgate keys list [--account ID] [--json] [--config FILE]
  chatgate keys revoke ID [--config FILE]
  chatgate keys rotate ID [--grace-seconds N] [--json] [--config FILE]     (N: how long the old secret keeps working, up to 604800)
  chatgate keys check STRING|-     (whether STRING, or stdin with -, is a well-formed chatgate key; exit 0 if so, 1 if not)
  chatgate accounts create --name NAME [--tokens-per-day N] [--tokens-per-month N] [--budget-per-day AMOUNT] [--budget-per-month AMOUNT] [--json] [--config FILE]
  chatgate accounts list [--json] [--config FILE]
  chatgate members add --account ID --email EMAIL --role owner|member [--json] [--config FILE]
  chatgate members list --account ID [--json] [--config FILE]
  chatgate members remove --account ID --email EMAIL [--transfer-keys-to OWNER_EMAIL] [--config FILE]
  chatgate members password-link --email EMAIL [--account ID] [--json] [--config FILE]
  chatgate store import FILE [--config FILE]     (a file store's keys.json into the configured SQLite or PostgreSQL store; again adds nothing)
  chatgate mock-worker [--host H] [--port N] [--latency-ms N] [--tokens-per-second N] [--log-requests]

The config file is --config, else $CHATGATE_CONFIG, else the embedded config/default.yaml.
`;


async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'serve':
      return serve(rest);
    case 'keys':
      return keys(rest);
    case 'accounts':
      return accountsCommand(rest);
    case 'members':
      return membersCommand(rest);
    case 'store':
      return storeCommand(rest);
    case 'mock-worker':
      return mockWorker(rest);
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(USAGE);
      return command === undefined ? 2 : 0;
    default:
      throw new UsageError(`unknown command '${command}'`);
  }
}

async function serve(args: string[]): Promise<number> {
  const { values } = parse(args, { config: { type: 'string' } });
  turnOffPretenuring(); // before the gateway allocates anything
  // Listening before the start: a signal that arrives while the gateway starts (an orchestrator that
  // gives up, a quick Ctrl-C, a reload sent at once) must act on it once it is up, not kill it
  // half-built by the signal's default action. The first SIGTERM or SIGINT starts the drain; later
  // ones (a terminal's Ctrl-C reaches every process of a cluster, and the primary then asks too)
  // change nothing.
  let running: Gateway | undefined;
  let reloadAsked = false;
  process.on('SIGHUP', () => {
    if (running) void running.reload();
    else reloadAsked = true;
  });
  const stopAsked = new Promise<void>((resolve) => {
    process.on('SIGTERM', resolve);
    process.on('SIGINT', resolve);
    whenNpmParentGone(resolve); // npm passes no signal on (process/parent-watch.ts)
  });
  running = await (await gateway()).startGateway(configFileFrom(values.config));
  if (reloadAsked) void running.reload(); // the start may have read the file before it changed
  await stopAsked;
  await running.shutdown();
  if (process.connected) process.disconnect(); // a cluster serving process: let the IPC channel go
  return 0;
}

async function keys(args: string[]): Promise<number> {
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

async function mockWorker(args: string[]): Promise<number> {
  const { values } = parse(args, {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '9100' },
    'latency-ms': { type: 'string', default: '0' },
    'tokens-per-second': { type: 'string', default: '50' },
    'log-requests': { type: 'boolean', default: false },
  });
  const { runMockWorker } = await import('./mock-worker/main.js');
  runMockWorker(values.host, wholeNumber('--port', values.port), {
    latencyMs: wholeNumber('--latency-ms', values['latency-ms']),
    tokensPerSecond: positiveNumber('--tokens-per-second', values['tokens-per-second']),
    ...(values['log-requests'] ? { onRequest: (id) => process.stdout.write(`${JSON.stringify({ msg: 'request', requestId: id ?? null })}\n`) } : {}),
  });
  return -1; // keeps running
}

/** The key, account and member commands act through the same service as the admin API, audited as `cli`. */
async function withAccounts<T>(configFile: string | undefined, act: (accounts: Accounts, config: Config) => Promise<T>): Promise<T> {
  const config = loadConfig(configFileFrom(configFile));
  const store = await openKeyStore(config);
  try {
    return await act(new Accounts(store, new Auditor(store, createLogger('silent'))), config);
  } finally {
    await store.close();
  }
}

const OPERATOR = { kind: 'cli' } as const;

/**
 * `store import FILE`: a file store's keys.json into the configured SQLite or PostgreSQL store, in one
 * transaction, each record unless it is there already (a second run adds nothing).
 */
async function storeCommand(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  const { values, positionals } = parse(rest, { config: { type: 'string' } }, true);
  if (action !== 'import') throw new UsageError(`unknown store action '${action ?? ''}'`);
  if (positionals.length !== 1) throw new UsageError('store import needs one FILE (a keys.json)');
  const settings = loadConfig(configFileFrom(values.config)).keyStore;
  const file = positionals[0]!;
  const [{ RECORD_KINDS }, { report, target }] = await Promise.all([import('./store/import-plan.js'), importIntoStore(settings, file)]);
  process.stdout.write(`imported ${file} into ${target}:\n`);
  for (const kind of RECORD_KINDS) {
    const skipped = report.skipped[kind] ? `, ${report.skipped[kind]} skipped (what they refer to is missing)` : '';
    process.stdout.write(`  ${kind.padEnd(11)} ${String(report.imported[kind]).padStart(6)} imported, ${report.present[kind]} already there${skipped}\n`);
  }
  return 0;
}

async function accountsCommand(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  const { values } = parse(rest, { config: { type: 'string' }, name: { type: 'string' }, 'tokens-per-day': { type: 'string' }, 'tokens-per-month': { type: 'string' }, ...BUDGET_FLAGS, json: { type: 'boolean' } });
  return withAccounts(values.config, async (accounts) => {
    if (action === 'create') {
      if (!values.name) throw new UsageError('accounts create needs --name NAME');
      const quota = { tokensPerDay: quotaValue('--tokens-per-day', values['tokens-per-day']), tokensPerMonth: quotaValue('--tokens-per-month', values['tokens-per-month']) };
      const account = await accounts.createAccount(values.name, OPERATOR, undefined, quota, budgetOf(values));
      process.stdout.write(values.json ? `${JSON.stringify(account)}\n` : `${account.id}\t${printable(account.name)}\n`);
      return 0;
    }
    if (action === 'list') {
      const list = await accounts.store.listAccounts();
      if (values.json) process.stdout.write(`${JSON.stringify(list)}\n`);
      else for (const a of list) process.stdout.write(`${a.id}\t${printable(a.name)}\tquota per day ${a.quota.tokensPerDay ?? 'none'}, per month ${a.quota.tokensPerMonth ?? 'none'}; budget per day ${a.budget.perDay ?? 'none'}, per month ${a.budget.perMonth ?? 'none'}\n`);
      return 0;
    }
    throw new UsageError(`unknown accounts action '${action ?? ''}'`);
  });
}

async function membersCommand(args: string[]): Promise<number> {
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

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError) {
      process.stderr.write(`chatgate: ${err.message}\n\n${USAGE}`);
      process.exitCode = 2;
    } else if (err instanceof ConfigError) {
      process.stderr.write(`chatgate: ${err.message}\n`);
      process.exitCode = 1;
    } else {
      process.stderr.write(`chatgate: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    }
    // A start-up that failed half way may keep open what it opened (store connections, a mock worker's IPC).
    process.exit();
  },
);
