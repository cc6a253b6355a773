/**
 * The source's import graph, read with the TypeScript compiler's own scanner (static imports and
 * exports, `import type`, dynamic `import()` and `require()`), and the two checks docs/architecture.md
 * asks of it: no import circle, and no file importing a part its row in the map does not allow.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/** file -> the files it imports; paths relative to the repository, with '/'. */
export type ImportGraph = Map<string, Set<string>>;

export function importGraph(root: string, files: readonly string[], read: (file: string) => string = (file) => readFileSync(path.join(root, file), 'utf8')): ImportGraph {
  const graph: ImportGraph = new Map();
  for (const file of files) {
    const imports = new Set<string>();
    for (const { fileName } of ts.preProcessFile(read(file), true, true).importedFiles) {
      if (!fileName.startsWith('.')) continue; // a package or a node: built-in
      const target = resolve(root, file, fileName, files);
      if (target) imports.add(target);
    }
    graph.set(file, imports);
  }
  return graph;
}

function resolve(root: string, from: string, specifier: string, files: readonly string[]): string | undefined {
  const base = path.posix.normalize(path.posix.join(path.posix.dirname(from), specifier));
  // A dynamic import() names a compiled file ('./postgres/store.js', as Node's ESM resolution needs): its source is the .ts.
  for (const candidate of [base, base.replace(/\.js$/, '.ts'), `${base}.ts`, `${base}/index.ts`]) {
    if (files.includes(candidate)) return candidate;
  }
  const onDisk = path.join(root, base);
  return existsSync(onDisk) && statSync(onDisk).isFile() ? base : undefined;
}

/** Every circle of files (a strongly connected component of two or more, or a file importing itself). */
export function findCircles(graph: ImportGraph): string[][] {
  // Tarjan's algorithm.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[][] = [];
  let next = 0;
  const visit = (file: string) => {
    index.set(file, next);
    low.set(file, next);
    next++;
    stack.push(file);
    onStack.add(file);
    for (const target of graph.get(file) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(file, Math.min(low.get(file)!, index.get(target)!));
      }
    }
    if (low.get(file) === index.get(file)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== file);
      if (component.length > 1 || graph.get(file)?.has(file)) circles.push(component.sort());
    }
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return circles;
}

/** One row of the map: a part (a folder ending in '/', or a file) and the parts it may import. */
export interface ImportRule {
  part: string;
  /** Parts it may import besides its own; 'everything' for the entry points. */
  mayImport: string[] | 'everything';
}

/**
 * The rows of the table that follows the heading `heading` in the map: first column the part (in
 * backticks), second the parts it may import (in backticks), or "nothing", or "everything".
 */
export function parseRules(markdown: string, heading: string): ImportRule[] {
  const lines = markdown.split('\n');
  const start = lines.findIndex((line) => line.replace(/^#+\s*/, '').trim() === heading);
  if (start === -1) throw new Error(`the map has no heading '${heading}'`);
  const rules: ImportRule[] = [];
  let inTable = false;
  for (const line of lines.slice(start + 1)) {
    if (line.startsWith('#')) break;
    if (!line.startsWith('|')) {
      if (inTable) break;
      continue;
    }
    inTable = true;
    const cells = line.split('|').slice(1, -1).map((cell) => cell.trim());
    if (cells.length < 2 || /^-+$/.test(cells[0]!.replace(/:/g, '')) || !cells[0]!.includes('`')) continue;
    const parts = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((match) => match[1]!);
    for (const part of parts(cells[0]!)) {
      rules.push({ part, mayImport: /\beverything\b/.test(cells[1]!) ? 'everything' : parts(cells[1]!) });
    }
  }
  if (rules.length === 0) throw new Error(`the map's table under '${heading}' has no rows`);
  return rules;
}

const within = (file: string, part: string) => (part.endsWith('/') ? file.startsWith(part) : file === part);

/** The most specific row for a file: a row naming the file itself, else its deepest folder. */
export function ruleFor(file: string, rules: readonly ImportRule[]): ImportRule | undefined {
  return rules.filter((rule) => within(file, rule.part)).sort((a, b) => b.part.length - a.part.length)[0];
}

export interface Violation {
  from: string;
  to: string;
  why: string;
}

/** Imports across a boundary the map does not allow, and files the map has no row for. */
export function forbiddenImports(graph: ImportGraph, rules: readonly ImportRule[]): Violation[] {
  const violations: Violation[] = [];
  for (const [from, targets] of graph) {
    const rule = ruleFor(from, rules);
    if (!rule) {
      violations.push({ from, to: '', why: 'no row of the map covers this file' });
      continue;
    }
    if (rule.mayImport === 'everything') continue;
    for (const to of targets) {
      if (within(to, rule.part) || rule.mayImport.some((part) => within(to, part))) continue;
      violations.push({ from, to, why: `${rule.part} may import ${rule.mayImport.length ? rule.mayImport.join(', ') : 'nothing of chatgate'}` });
    }
  }
  return violations;
}
