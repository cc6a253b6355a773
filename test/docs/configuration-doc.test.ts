/**
 * docs/configuration.md names every setting the config schema takes: a setting added to
 * src/config.ts without a line in the docs fails here. Paths are written as the page writes them:
 * `a.b.c`, a map's entries as `<name>` (`providers.<name>.workers`); an array of objects is named by
 * its own path (its entries' fields are described in its row).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { z } from 'zod';
import { configSchema } from '../../src/config';

type Def = { type: string; shape?: Record<string, z.ZodType>; innerType?: z.ZodType; in?: z.ZodType; options?: z.ZodType[]; valueType?: z.ZodType };
const defOf = (schema: z.ZodType) => (schema as unknown as { _zod: { def: Def } })._zod.def;

/** The object fields reachable from a schema through wrappers (optional, default, pipes, unions of objects). */
function fieldsOf(schema: z.ZodType): Array<[string, z.ZodType]> | { record: z.ZodType } | undefined {
  const def = defOf(schema);
  if (def.type === 'object') return Object.entries(def.shape!);
  if (def.type === 'record') return { record: def.valueType! };
  if (def.innerType) return fieldsOf(def.innerType);
  if (def.type === 'pipe') return fieldsOf(def.in!);
  if (def.type === 'union') {
    const merged = new Map<string, z.ZodType>();
    for (const option of def.options!) {
      const fields = fieldsOf(option);
      if (Array.isArray(fields)) for (const [name, field] of fields) if (!merged.has(name)) merged.set(name, field);
    }
    return merged.size ? [...merged] : undefined;
  }
  return undefined;
}

function settings(schema: z.ZodType, prefix: string): string[] {
  const fields = fieldsOf(schema);
  if (fields === undefined) return [prefix];
  if (!Array.isArray(fields)) return settings(fields.record, `${prefix}.<name>`);
  return fields.flatMap(([name, field]) => settings(field, prefix ? `${prefix}.${name}` : name));
}

/**
 * Named on the page: in backticks, or (a map's entries, e.g. a price's fields) as a word of the row of
 * its map. A provider's `upstream` takes every `upstream` setting, whose rows name them.
 */
function documented(doc: string, setting: string): boolean {
  const asWritten = setting.replace(/^providers\.<name>\.upstream\./, 'upstream.');
  if (doc.includes(`\`${asWritten}\``)) return true;
  const map = /^(.*)\.<name>\.(\w+)$/.exec(asWritten);
  const row = map && doc.split('\n').find((line) => line.startsWith(`| \`${map[1]}\` |`));
  return Boolean(row && new RegExp(`\\b${map[2]}\\b`).test(row));
}

test('every setting of the schema is named in docs/configuration.md', () => {
  const doc = readFileSync(path.join(__dirname, '..', '..', 'docs', 'configuration.md'), 'utf8');
  const all = settings(configSchema, '');
  expect(all).toEqual(expect.arrayContaining(['listen.port', 'providers.<name>.workers', 'console.smtp.passwordEnv', 'prices.models.<name>.outputPerMillion'])); // control: the walk reaches nested settings
  expect(all.filter((setting) => !documented(doc, setting))).toEqual([]);
  expect(documented(doc, 'listen.portt')).toBe(false); // control: a misspelt setting is not found
  expect(documented(doc, 'prices.models.<name>.outputPerBillion')).toBe(false);
});
