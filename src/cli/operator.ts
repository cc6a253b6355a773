/**
 * What the key, account and member commands share: the configured store opened for one command, and
 * the service they act through with a platform admin's rights, as the actor `cli`.
 */
import { Auditor } from '../accounts/audit';
import { Accounts } from '../accounts/service';
import { configFileFrom, loadConfig, type Config } from '../config';
import { openKeyStore } from '../store/open';
import { createLogger } from '../telemetry/log';

/** The key, account and member commands act through the same service as the admin API, audited as `cli`. */
export async function withAccounts<T>(configFile: string | undefined, act: (accounts: Accounts, config: Config) => Promise<T>): Promise<T> {
  const config = loadConfig(configFileFrom(configFile));
  const store = await openKeyStore(config);
  try {
    return await act(new Accounts(store, new Auditor(store, createLogger('silent'))), config);
  } finally {
    await store.close();
  }
}

export const OPERATOR = { kind: 'cli' } as const;
