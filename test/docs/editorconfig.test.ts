/**
 * The house's one style, as .editorconfig states it, holds for every file in the repository: UTF-8
 * (valid), LF line ends, a final newline, no trailing whitespace (Markdown may keep its two-space
 * breaks), spaces not tabs. And the LICENSE is the license package.json names.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const ROOT = path.join(__dirname, '..', '..');
const files = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' })
  .split('\0')
  .filter((file) => file !== '' && !/\.(png|ico)$/.test(file));

test('every tracked text file: valid UTF-8, LF ends, a final newline, no trailing whitespace, no tabs', () => {
  const problems: string[] = [];
  const decoder = new TextDecoder('utf-8', { fatal: true });
  for (const file of files) {
    let bytes: Buffer;
    try {
      bytes = readFileSync(path.join(ROOT, file));
    } catch {
      continue; // deleted in the working tree, not yet in the index
    }
    let text: string;
    try {
      text = decoder.decode(bytes);
    } catch {
      problems.push(`${file}: not UTF-8`);
      continue;
    }
    if (text.length === 0) continue;
    if (text.includes('\r')) problems.push(`${file}: CR line ends`);
    if (!text.endsWith('\n')) problems.push(`${file}: no final newline`);
    if (!file.endsWith('.md') && /[ \t]+$/m.test(text)) problems.push(`${file}: trailing whitespace`);
    if (!file.endsWith('.md') && path.basename(file) !== 'LICENSE' && text.includes('\t')) problems.push(`${file}: a tab`);
  }
  expect(problems).toEqual([]);
});

test('LICENSE is the Apache License 2.0 that package.json names', () => {
  expect((JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { license: string }).license).toBe('Apache-2.0');
  const license = readFileSync(path.join(ROOT, 'LICENSE'), 'utf8');
  expect(license).toContain('Apache License');
  expect(license).toContain('Version 2.0, January 2004');
  expect(license).toContain('END OF TERMS AND CONDITIONS');
});
