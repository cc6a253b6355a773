/**
 * `chatgate store import FILE`: a retired file store's keys.json into the configured store.
 */
import { configFileFrom, loadConfig } from '../config';
import { importIntoStore } from '../store/open';
import { parse, UsageError } from './flags';

/**
 * `store import FILE`: a file store's keys.json into the configured SQLite or PostgreSQL store, in one
 * transaction, each record unless it is there already (a second run adds nothing).
 */
export async function storeCommand(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  const { values, positionals } = parse(rest, { config: { type: 'string' } }, true);
  if (action !== 'import') throw new UsageError(`unknown store action '${action ?? ''}'`);
  if (positionals.length !== 1) throw new UsageError('store import needs one FILE (a keys.json)');
  const settings = loadConfig(configFileFrom(values.config)).keyStore;
  const file = positionals[0]!;
  const [{ RECORD_KINDS }, { report, target }] = await Promise.all([import('../store/import-plan.js'), importIntoStore(settings, file)]);
  process.stdout.write(`imported ${file} into ${target}:\n`);
  for (const kind of RECORD_KINDS) {
    const skipped = report.skipped[kind] ? `, ${report.skipped[kind]} skipped (what they refer to is missing)` : '';
    process.stdout.write(`  ${kind.padEnd(11)} ${String(report.imported[kind]).padStart(6)} imported, ${report.present[kind]} already there${skipped}\n`);
  }
  return 0;
}
