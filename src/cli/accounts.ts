/**
 * `chatgate accounts create | list`: a store's accounts, their quotas and budgets.
 */
import { BUDGET_FLAGS, budgetOf, parse, printable, quotaValue, UsageError } from './flags';
import { OPERATOR, withAccounts } from './operator';

export async function accountsCommand(args: string[]): Promise<number> {
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
