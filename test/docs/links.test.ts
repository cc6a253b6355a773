/**
 * The Markdown docs hold together: every relative link in README.md, CONTRIBUTING.md, SECURITY.md,
 * docs/*.md and src/tuning/README.md names a file or folder that exists, and every anchor (`#part`
 * alone, or `file.md#part`) names a heading of its target, by GitHub's slugs. External links
 * (http, https, mailto) are not followed. The README stays short enough to read in ten minutes.
 *
 * The checker reads only what it is given and the files links point to, so the last tests can feed
 * it a page with a broken link and a broken anchor and see both reported.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { checkLinks, slugsOf } from '../helpers/doc-links';

const ROOT = path.join(__dirname, '..', '..');
const README_MAX_BYTES = 12_288;

/** The pages checked, relative to the repository. */
function documentationFiles(): string[] {
  const docs = existsSync(path.join(ROOT, 'docs'))
    ? readdirSync(path.join(ROOT, 'docs'))
        .filter((name) => name.endsWith('.md'))
        .sort()
        .map((name) => `docs/${name}`)
    : [];
  return ['README.md', 'CONTRIBUTING.md', 'SECURITY.md', ...docs, 'src/tuning/README.md'];
}

describe('the documentation', () => {
  const files = documentationFiles();

  test.each(files)('%s exists', (file) => {
    expect(existsSync(path.join(ROOT, file))).toBe(true);
  });

  test.each(files)('every relative link and anchor in %s resolves', (file) => {
    const problems = existsSync(path.join(ROOT, file)) ? checkLinks(file, readFileSync(path.join(ROOT, file), 'utf8')) : [];
    expect(problems).toEqual([]);
  });

  test(`README.md is at most ${README_MAX_BYTES} bytes`, () => {
    expect(statSync(path.join(ROOT, 'README.md')).size).toBeLessThanOrEqual(README_MAX_BYTES);
  });
});

describe('the link checker', () => {
  const page = [
    '# A page',
    '',
    'See [the configuration](configuration.md#reload-sighup), [the README](../README.md),',
    '[a folder](../src/tuning), [a line](../src/errors.ts#L1), [here](#a-page) and [the web](https://example.com/x.md#nowhere).',
    '',
    '## Details',
    '',
    'Broken: [a missing page](no-such-page.md) and [a missing heading](#no-such-heading).',
    '',
    '```sh',
    'echo "[not a link](nowhere.md)"',
    '# not a heading',
    '```',
    '',
    'Inline code is not a link either: `[x](nowhere.md)`.',
  ].join('\n');

  test('reports a link to a missing file and an anchor to a missing heading, and nothing else', () => {
    expect(checkLinks('docs/example.md', page)).toEqual([
      'docs/example.md:8: no-such-page.md: no such file or folder',
      'docs/example.md:8: #no-such-heading: no such heading in this page',
    ]);
  });

  test("reports an anchor that names no heading of another page", () => {
    expect(checkLinks('docs/example.md', 'See [it](configuration.md#no-such-setting).')).toEqual([
      'docs/example.md:1: configuration.md#no-such-setting: no such heading in docs/configuration.md',
    ]);
  });

  test("makes GitHub's slugs: lower case, punctuation dropped but - and _, spaces to -, repeats numbered", () => {
    expect(slugsOf(['Reload: SIGHUP', 'Cluster mode: `server.processes`', 'The `chatgate keys` CLI', 'snake_case and-dash', 'Notes', 'Notes', 'Notes'])).toEqual([
      'reload-sighup',
      'cluster-mode-serverprocesses',
      'the-chatgate-keys-cli',
      'snake_case-and-dash',
      'notes',
      'notes-1',
      'notes-2',
    ]);
  });
});
