/**
 * Small modules by concern: no source file over 400 lines, no function over 150 (the console's
 * browser modules included). Read with the TypeScript compiler's parser; a control shows the
 * function measure finds a long one.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const SRC = path.join(__dirname, '..', 'src');
const MAX_FILE_LINES = 400;
const MAX_FUNCTION_LINES = 150;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return sources(file);
    return /\.(ts|js)$/.test(entry.name) ? [file] : [];
  });
}

/** Each function-like node with a body longer than `max` lines: "name (lines)". */
function longFunctions(name: string, text: string, max: number): string[] {
  const file = ts.createSourceFile(name, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const lines = file.getLineAndCharacterOfPosition(node.getEnd()).line - file.getLineAndCharacterOfPosition(node.getStart()).line + 1;
      if (lines > max) found.push(`${name}:${file.getLineAndCharacterOfPosition(node.getStart()).line + 1} (${lines} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

const files = sources(SRC).map((file) => ({ name: path.relative(SRC, file), text: readFileSync(file, 'utf8') }));

test(`no source file is over ${MAX_FILE_LINES} lines`, () => {
  expect(files.length).toBeGreaterThan(100);
  expect(files.filter(({ text }) => text.split('\n').length - 1 > MAX_FILE_LINES).map(({ name }) => name)).toEqual([]);
});

test(`no function is over ${MAX_FUNCTION_LINES} lines`, () => {
  expect(files.flatMap(({ name, text }) => longFunctions(name, text, MAX_FUNCTION_LINES))).toEqual([]);
  // Control: a function of 151 lines is found, and so is one inside a class.
  const body = '  x++;\n'.repeat(MAX_FUNCTION_LINES - 1);
  expect(longFunctions('f.ts', `function f() {\n${body}}\n`, MAX_FUNCTION_LINES)).toEqual([`f.ts:1 (${MAX_FUNCTION_LINES + 1} lines)`]);
  expect(longFunctions('c.ts', `class C {\n  m() {\n${body.replace(/^/gm, '  ')}  }\n}\n`, MAX_FUNCTION_LINES)).toHaveLength(1);
});
