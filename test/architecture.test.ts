/**
 * The code keeps the shape docs/architecture.md draws: no import circle anywhere in src/, and no
 * file importing a part that its row of the map ("What each part may import") does not allow. The
 * rules are read from the map itself, so the document and the check cannot drift apart.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { findCircles, forbiddenImports, importGraph, parseRules } from './helpers/import-rules';

const ROOT = path.join(__dirname, '..');
const MAP = readFileSync(path.join(ROOT, 'docs', 'architecture.md'), 'utf8');
const HEADING = 'What each part may import';

function sourceFiles(dir = 'src'): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const file = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(file);
    return entry.name.endsWith('.ts') ? [file] : [];
  });
}

const files = sourceFiles();
const rules = parseRules(MAP, HEADING);

/** The real tree, with one line added to one file. */
function graphWith(file: string, addedLine: string) {
  return importGraph(ROOT, files, (name) => readFileSync(path.join(ROOT, name), 'utf8') + (name === file ? `\n${addedLine}\n` : ''));
}

test('src/ has no import circle', () => {
  expect(findCircles(importGraph(ROOT, files))).toEqual([]);
});

test('every file imports only what its part of the map allows, and every file is on the map', () => {
  expect(forbiddenImports(importGraph(ROOT, files), rules)).toEqual([]);
});

test('at most eight files stay directly in src/: the entry points and the leaves', () => {
  const top = files.filter((file) => file.split('/').length === 2);
  expect(top.length).toBeLessThanOrEqual(8);
  for (const file of top) expect(rules.some((rule) => rule.part === file)).toBe(true);
});

test('the check finds a circle added on purpose', () => {
  const circles = findCircles(graphWith('src/context.ts', "import type { ChatRequest as Shape } from './pipeline/body';"));
  expect(circles).toEqual([expect.arrayContaining(['src/context.ts', 'src/pipeline/body.ts'])]);
});

test('the check finds a forbidden import added on purpose: validation reaching into auth', () => {
  const violations = forbiddenImports(graphWith('src/pipeline/validate.ts', "import type { KeyRecord } from '../store/types';"), rules);
  expect(violations).toEqual([expect.objectContaining({ from: 'src/pipeline/validate.ts', to: 'src/store/types.ts' })]);
});

test('the check sees dynamic imports and type-only imports too', () => {
  const dynamic = forbiddenImports(graphWith('src/ratelimit/limiter.ts', "const later = () => import('../auth/cache');"), rules);
  expect(dynamic).toEqual([expect.objectContaining({ from: 'src/ratelimit/limiter.ts', to: 'src/auth/cache.ts' })]);
});

test('a file the map has no row for is reported', () => {
  const violations = forbiddenImports(new Map([['lib/elsewhere.ts', new Set<string>()]]), rules);
  expect(violations).toEqual([expect.objectContaining({ from: 'lib/elsewhere.ts', why: 'no row of the map covers this file' })]);
});
