#!/usr/bin/env node
/**
 * `chatgate`: serve | keys | accounts | members | store | mock-worker. Exit codes: 0 done, 1 failed, 2 usage.
 * The key, account and member commands work on the config's store with a platform admin's rights,
 * through the admin API's service: every change leaves the same audit event, by the actor `cli`.
 */
import { ConfigError } from './config';
import { accountsCommand } from './cli/accounts';
import { UsageError } from './cli/flags';
import { keys } from './cli/keys';
import { membersCommand } from './cli/members';
import { mockWorker } from './cli/mock-worker';
import { serve } from './cli/serve';
import { storeCommand } from './cli/store-import';

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
