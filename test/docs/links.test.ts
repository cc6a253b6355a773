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

/**
 * GitHub's heading ids (github-slugger): lower-case, drop every character that is not a letter, a
 * mark, a digit, a connector (`_`), `-` or a space, then each space becomes `-`. A repeated heading
 * gets `-1`, `-2`, ... in order.
 */
export function slugsOf(headings: readonly string[]): string[] {
  const seen = new Map<string, number>();
  return headings.map((heading) => {
    const base = heading.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-');
    let slug = base;
    let count = seen.get(base) ?? 0;
    while (seen.has(slug)) slug = `${base}-${++count}`;
    seen.set(base, count);
    seen.set(slug, 0);
    return slug;
  });
}

/** The text with fenced code blocks and inline code spans blanked out (same length, newlines kept), so nothing in them counts. */
function withoutCode(text: string): string {
  const blank = (part: string) => part.replace(/[^\n]/g, ' ');
  const lines = text.split('\n');
  let fence: string | undefined;
  const prose = lines.map((line) => {
    const marker = /^ {0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence === undefined && marker) {
      fence = marker;
      return blank(line);
    }
    if (fence !== undefined) {
      if (marker && marker[0] === fence[0] && marker.length >= fence.length && line.trim() === marker) fence = undefined;
      return blank(line);
    }
    return line;
  });
  // A code span: a run of backticks, text that crosses no blank line, the same run again.
  return prose.join('\n').replace(/(?<!`)(`+)(?!`)(?:[^\n]|\n(?![ \t]*\n))*?[^`]\1(?!`)/g, blank);
}

/** Heading texts as GitHub renders them (inline markup gone), in order; HTML `id`/`name` anchors too. */
function anchorsOf(markdown: string): Set<string> {
  const raw = markdown.split('\n');
  const prose = withoutCode(markdown).split('\n');
  const headings: string[] = [];
  prose.forEach((line, i) => {
    if (!/^ {0,3}#{1,6}(?:[ \t]|$)/.test(line)) return;
    const text = raw[i]!
      .replace(/^ {0,3}#{1,6}[ \t]*/, '')
      .replace(/[ \t]+#+[ \t]*$/, '')
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/<[^>]+>/g, '')
      .replace(/`/g, '')
      .trim();
    headings.push(text);
  });
  const anchors = new Set(slugsOf(headings));
  for (const match of withoutCode(markdown).matchAll(/<a\s[^>]*\b(?:id|name)=["']([^"']+)["']/gi)) anchors.add(match[1]!);
  return anchors;
}

interface Link {
  target: string;
  line: number;
}

/** Inline links and images `[text](target "title")`, reference definitions `[id]: target`, and HTML href/src. */
function linksOf(markdown: string): Link[] {
  const prose = withoutCode(markdown);
  const lineAt = (offset: number) => prose.slice(0, offset).split('\n').length;
  const links: Link[] = [];
  const add = (target: string, offset: number) => links.push({ target: target.replace(/^<(.*)>$/, '$1'), line: lineAt(offset) });
  for (const m of prose.matchAll(/!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)/g)) add(m[1]!, m.index);
  for (const m of prose.matchAll(/^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)/gm)) add(m[1]!, m.index);
  for (const m of prose.matchAll(/<(?:a|img)\s[^>]*\b(?:href|src)=["']([^"']*)["']/gi)) add(m[1]!, m.index);
  return links;
}

const EXTERNAL = /^(?:https?:|mailto:)/i;
/** GitHub's own anchors into a source file's lines. */
const LINE_ANCHOR = /^L\d+(?:-L\d+)?$/;

/**
 * Every problem with the links of one page, as `file:line: target: what`. `file` is the page's path
 * relative to `root`; links resolve against its folder (a leading `/`: against `root`).
 */
export function checkLinks(file: string, markdown: string, root = ROOT): string[] {
  const problems: string[] = [];
  const pageAnchors = anchorsOf(markdown);
  const anchorsIn = new Map<string, Set<string>>();
  for (const { target, line } of linksOf(markdown)) {
    const report = (what: string) => problems.push(`${file}:${line}: ${target}: ${what}`);
    if (EXTERNAL.test(target)) continue;
    if (target === '') {
      report('empty link');
      continue;
    }
    const hashAt = target.indexOf('#');
    const pathPart = (hashAt === -1 ? target : target.slice(0, hashAt)).replace(/\?.*$/, '');
    let anchor: string | undefined;
    let decoded: string;
    try {
      anchor = hashAt === -1 ? undefined : decodeURIComponent(target.slice(hashAt + 1));
      decoded = decodeURIComponent(pathPart);
    } catch {
      report('malformed percent-encoding');
      continue;
    }
    if (pathPart === '') {
      if (anchor !== undefined && !pageAnchors.has(anchor)) report('no such heading in this page');
      continue;
    }
    const resolved = decoded.startsWith('/') ? path.join(root, decoded) : path.join(root, path.dirname(file), decoded);
    if (path.relative(root, resolved).startsWith('..')) {
      report('points outside the repository');
      continue;
    }
    if (!existsSync(resolved)) {
      report('no such file or folder');
      continue;
    }
    if (anchor === undefined) continue;
    if (statSync(resolved).isDirectory()) {
      report('an anchor on a folder');
    } else if (resolved.endsWith('.md')) {
      if (!anchorsIn.has(resolved)) anchorsIn.set(resolved, anchorsOf(readFileSync(resolved, 'utf8')));
      if (!anchorsIn.get(resolved)!.has(anchor)) report(`no such heading in ${path.relative(root, resolved)}`);
    } else if (!LINE_ANCHOR.test(anchor)) {
      report('an anchor that is not a line (#L12) on a file that has no headings');
    }
  }
  return problems;
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
