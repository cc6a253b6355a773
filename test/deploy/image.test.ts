/**
 * The image: deploy/Dockerfile installs with the project's .npmrc (no install scripts run), compiles
 * nothing (its Node runs SQLite itself) and ships no compiler, and the
 * build context .dockerignore lets through holds what the Dockerfile copies and nothing else: not
 * data/ (the dev TLS key, keys.json), not node_modules/, not .git/. .dockerignore is read with
 * Docker's own rules (moby/patternmatcher: last match wins, a pattern also matches a file's parents).
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { DEPLOY, ROOT, read } from './tools';

interface Pattern {
  negate: boolean;
  dirs: number;
  regex: RegExp;
}

function parseDockerignore(text: string): Pattern[] {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const negate = line.startsWith('!');
      const cleaned = path.posix.normalize(negate ? line.slice(1).trim() : line).replace(/^\/+/, '').replace(/\/+$/, '');
      let source = '';
      for (let i = 0; i < cleaned.length; i++) {
        const ch = cleaned[i]!;
        if (ch === '*' && cleaned[i + 1] === '*') {
          i++;
          if (cleaned[i + 1] === '/') {
            i++;
            source += '(.*/)?';
          } else source += '.*';
        } else if (ch === '*') source += '[^/]*';
        else if (ch === '?') source += '[^/]';
        else source += ch.replace(/[.+^${}()|[\]\\]/g, '\\$&');
      }
      return { negate, dirs: cleaned.split('/').length, regex: new RegExp(`^${source}$`) };
    });
}

/** Whether Docker leaves this path (relative, with /) out of the build context. */
function ignored(file: string, patterns: Pattern[]): boolean {
  const parts = file.split('/');
  let result = false;
  for (const pattern of patterns) {
    let match = pattern.regex.test(file);
    if (!match && parts.length > 1 && pattern.dirs <= parts.length - 1) match = pattern.regex.test(parts.slice(0, pattern.dirs).join('/'));
    if (match) result = !pattern.negate;
  }
  return result;
}

const dockerfile = () => read(DEPLOY, 'Dockerfile').replace(/\\\n/g, ' ');
const instructions = () =>
  dockerfile()
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
/** The sources of every COPY from the build context (not --from another stage). */
const contextSources = () =>
  instructions()
    .filter((line) => /^COPY\s/i.test(line) && !/--from=/.test(line))
    .flatMap((line) => line.split(/\s+/).slice(1).filter((word) => !word.startsWith('--')).slice(0, -1))
    .map((source) => source.replace(/^\.\//, '').replace(/\/$/, ''));

test('the project .npmrc turns install scripts off, and the image installs with it', () => {
  expect(read(ROOT, '.npmrc')).toMatch(/^ignore-scripts=true$/m);
  // In each stage that runs npm, .npmrc is copied in before the first npm command.
  const stages: string[][] = [];
  for (const line of instructions()) {
    if (/^FROM\s/i.test(line)) stages.push([]);
    stages.at(-1)?.push(line);
  }
  expect(stages.length).toBe(2);
  const npmStages = stages.filter((stage) => stage.some((line) => /^RUN\s.*\bnpm\s/.test(line)));
  expect(npmStages.length).toBeGreaterThan(0);
  for (const stage of npmStages) {
    const firstNpm = stage.findIndex((line) => /^RUN\s.*\bnpm\s/.test(line));
    const npmrc = stage.findIndex((line) => /^COPY\s/.test(line) && !/--from=/.test(line) && line.split(/\s+/).includes('.npmrc'));
    expect({ npmrc, before: firstNpm }).toEqual({ npmrc: expect.any(Number), before: firstNpm });
    expect(npmrc).toBeGreaterThanOrEqual(0);
    expect(npmrc).toBeLessThan(firstNpm);
    expect(stage[firstNpm]).toMatch(/\bnpm ci\b/);
  }
  // .ci/run reads the Node major the image runs from the first FROM line.
  expect(instructions()[0]).toMatch(/^FROM node:\d+/);
});

/** The instructions of each stage, in order (the first line of each is its FROM). */
const stagesOf = () => {
  const stages: string[][] = [];
  for (const line of instructions()) {
    if (/^FROM\s/i.test(line)) stages.push([]);
    stages.at(-1)?.push(line);
  }
  return stages;
};
const COMPILERS = /\b(g\+\+|gcc|clang|make|python3?|build-essential|node-gyp)\b/;

test('the image compiles nothing: no compiler in either stage, the build script a no-op on its Node (node:sqlite), better-sqlite3 pruned', () => {
  const [build, final] = stagesOf() as [string[], string[]];
  const index = (stage: string[], pattern: RegExp) => stage.findIndex((line) => pattern.test(line));
  for (const stage of [build, final]) expect(stage.filter((line) => /^RUN\s/.test(line) && (/\bapt-get\b|\bapk\b/.test(line) || COMPILERS.test(line)))).toEqual([]);
  const npmCi = index(build, /^RUN\s.*\bnpm ci\b/);
  const buildAndPrune = index(build, /^RUN\s+npm run build && npm prune --omit=dev --omit=optional\b/);
  expect({ npmCi, buildAndPrune }).toEqual({ npmCi: expect.any(Number), buildAndPrune: expect.any(Number) });
  expect(npmCi).toBeGreaterThanOrEqual(0);
  expect(npmCi).toBeLessThan(buildAndPrune);
  // The build script comes from the build context; on the image's Node it builds nothing.
  expect(build.some((line) => /^COPY\s/.test(line) && !/--from=/.test(line) && line.includes('deploy/build-native.cjs'))).toBe(true);
  const major = Number(/^FROM\s+node:(\d+)/.exec(build[0]!)?.[1]);
  expect(major).toBeGreaterThanOrEqual(24);
  // better-sqlite3 is optional (Node 20 only), so the prune leaves it out of the image.
  const pkg = JSON.parse(read(ROOT, 'package.json')) as { dependencies: Record<string, string>; optionalDependencies: Record<string, string> };
  expect(Object.keys(pkg.optionalDependencies)).toEqual(['better-sqlite3']);
  expect(pkg.dependencies['better-sqlite3']).toBeUndefined();
  // The final stage installs nothing and builds nothing: it copies node_modules from the build stage.
  expect(final.filter((line) => /^RUN\s/.test(line) && /\b(apt-get|apk|npm|npx|yum|dnf)\b/.test(line))).toEqual([]);
  expect(final.some((line) => /^COPY\s+--from=build\s+\/app\/node_modules\s/.test(line))).toBe(true);
  expect(final[0]).toBe(build[0]!.replace(/\s+AS\s+build$/i, '')); // the same Node as it was built with
});

test('.dockerignore keeps data/, node_modules/, .git/, keys and build output out of the build context', () => {
  const patterns = parseDockerignore(read(ROOT, '.dockerignore'));
  for (const file of [
    'data/keys.json',
    'data/chatgate.db',
    'data/chatgate.db-wal',
    'data/tls/key.pem',
    'data/tls/cert.pem',
    'node_modules/express/index.js',
    'node_modules/.bin/tsc',
    '.git/HEAD',
    'dist/cli.js',
    'bench/results/run.json',
    'coverage/lcov.info',
    'artifacts/report.txt',
    'test/deploy/deploy.test.ts',
    'docs/operations.md',
    'npm-debug.log',
    'src/server.pem',
    'src/admin/tls.key',
    'config/keys.json',
    '.env',
  ]) {
    expect({ file, ignored: ignored(file, patterns) }).toEqual({ file, ignored: true });
  }
});

test('the build context holds every file the Dockerfile copies, and nothing else of the repository', () => {
  const patterns = parseDockerignore(read(ROOT, '.dockerignore'));
  const sources = contextSources();
  expect(sources).toEqual(expect.arrayContaining(['package.json', 'package-lock.json', '.npmrc', 'src', 'config', 'deploy/build-native.cjs']));
  for (const source of sources) expect({ source, ignored: ignored(source, patterns) }).toEqual({ source, ignored: false });
  for (const file of ['src/main.ts', 'src/admin/console/index.html', 'config/compose.yaml', 'config/default.yaml']) {
    expect({ file, ignored: ignored(file, patterns) }).toEqual({ file, ignored: false });
  }
  // Walk the work tree as it is (data/, dist/ and the rest included where present), less the two largest folders.
  const walk = (dir: string): string[] =>
    readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
      const relative = dir === '' ? entry.name : `${dir}/${entry.name}`;
      if (entry.isDirectory()) return relative === 'node_modules' || relative === '.git' ? [] : walk(relative);
      return [relative];
    });
  const sent = walk('').filter((file) => !ignored(file, patterns));
  const copied = (file: string) => sources.some((source) => file === source || file.startsWith(`${source}/`));
  expect(sent.filter((file) => !copied(file))).toEqual([]);
  expect(sent).toContain('src/main.ts');
});
