/**
 * The Markdown link checker of the docs tests: every relative link of a page names a file or folder
 * that exists, and every anchor (`#part` alone, or `file.md#part`) names a heading of its target, by
 * GitHub's slugs. External links (http, https, mailto) are not followed. It reads only what it is
 * given and the files links point to.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

const ROOT = path.join(__dirname, '..', '..');

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
  for (const m of prose.matchAll(/!?\[(?:[^[\]]|\[[^[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)/g)) add(m[1]!, m.index);
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
