/**
 * The secret-scanning rules shipped in deploy/secret-scanning: gitleaks', TruffleHog's and
 * secretlint's regexes, each run with RE2's semantics (re2-wasm: Google's RE2, as Go's regexp, which
 * gitleaks and TruffleHog use), find fresh keys wherever source text holds them and nothing of other
 * vendors' keys, nor a cut or overlong key; the keywords pre-filter every case found; and the real
 * secretlint CLI, given the shipped config, fails on a file holding a fresh key and passes one holding
 * only an OpenAI-shaped key.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { RE2 } from 're2-wasm';
import YAML from 'yaml';
import { generateKey } from '../../src/auth/keys';
import { DEPLOY, read, ROOT, run } from './tools';

const DIR = path.join(DEPLOY, 'secret-scanning');

/** gitleaks.toml's rules: id, regex (a TOML literal string), secretGroup and keywords. */
function gitleaksRules(): Array<{ id: string; regex: string; secretGroup: number; keywords: string[] }> {
  const text = read(DIR, 'gitleaks.toml');
  expect(text).toMatch(/^\[extend\]\nuseDefault = true$/m);
  return text
    .split('\n[[rules]]\n')
    .slice(1)
    .map((block) => ({
      id: /^id = "([^"]+)"$/m.exec(block)![1]!,
      regex: /^regex = '''(.*)'''$/m.exec(block)![1]!,
      secretGroup: Number(/^secretGroup = (\d+)$/m.exec(block)![1]),
      keywords: JSON.parse(/^keywords = (\[.*\])$/m.exec(block)![1]!) as string[],
    }));
}

const trufflehog = YAML.parse(read(DIR, 'trufflehog.yaml')) as { detectors: Array<{ name: string; keywords: string[]; regex: Record<string, string> }> };
const secretlint = JSON.parse(read(DIR, 'secretlintrc.json')) as { rules: Array<{ id: string; options: { patterns: Array<{ name: string; patterns: string[] }> } }> };
/** secretlint's patterns are JavaScript regex literals: "/body/flags". */
const secretlintPatterns = secretlint.rules.flatMap((rule) => rule.options.patterns.flatMap((pattern) => pattern.patterns)).map((literal) => /^\/(.*)\/([a-z]*)$/.exec(literal)![1]!);

/** Compiled once each: re2-wasm never frees an RE2 in its fixed 16 MiB heap. */
const compiled = new Map<string, RE2>();

/** Every match of `source` in `text` under RE2, group `group` of each. */
function findAll(source: string, text: string, group: number): string[] {
  let re = compiled.get(source);
  if (!re) {
    re = new RE2(source, 'gu');
    compiled.set(source, re);
  }
  re.lastIndex = 0;
  const found: string[] = [];
  for (let match = re.exec(text); match; match = re.exec(text)) found.push(match[group]!);
  return found;
}

/** Where keys turn up in source text. */
const contexts = (key: string) => [
  `OPENAI_API_KEY=${key}`,
  `export CHATGATE_KEY="${key}"`,
  `{"apiKey": "${key}", "baseURL": "https://gateway.example/v1"}`,
  `curl -H 'Authorization: Bearer ${key}' https://gateway.example/v1/chat/completions`,
  `client = OpenAI(api_key='${key}')`,
  `api_key: ${key}\n`,
  `https://gateway.example/?key=${key}&x=1`,
  `${key}`,
  `<meta name="k" content="${key}">`,
];

const OTHER_VENDORS = [
  `sk-proj-${randomBytes(60).toString('base64url')}`, // OpenAI project key
  `sk-${'A1b2C3d4'.repeat(6)}`, // OpenAI legacy key
  `sk-ant-api03-${randomBytes(70).toString('base64url')}-${'A'.repeat(8)}AA`, // Anthropic
  `ghp_${'a1B2c3D4e5'.repeat(3)}abcdef`, // GitHub personal token
  'AKIAIOSFODNN7EXAMPLE', // AWS access key id
  `xoxb-${'1234567890'}-${'1234567890'}-${'a'.repeat(24)}`, // Slack bot token
  `hf_${'A'.repeat(34)}`, // Hugging Face
];

const rules = () => [
  ...gitleaksRules()
    .filter((rule) => rule.id === 'chatgate-api-key')
    .map((rule) => ({ where: `gitleaks ${rule.id}`, regex: rule.regex, group: rule.secretGroup, keywords: rule.keywords })),
  ...trufflehog.detectors.flatMap((detector) => Object.values(detector.regex).map((regex) => ({ where: `trufflehog ${detector.name}`, regex, group: 1, keywords: detector.keywords }))),
  ...secretlintPatterns.map((regex) => ({ where: 'secretlint', regex, group: 1, keywords: ['cgk_'] })),
];

test('every shipped rule finds a fresh key, exactly, in every context; its keywords are in the text it is found in', () => {
  const all = rules();
  expect(all.map((rule) => rule.where.split(' ')[0])).toEqual(['gitleaks', 'trufflehog', 'secretlint']);
  for (let i = 0; i < 20; i++) {
    const key = generateKey();
    for (const text of contexts(key)) {
      for (const rule of all) {
        expect({ where: rule.where, text, found: findAll(rule.regex, text, rule.group) }).toEqual({ where: rule.where, text, found: [key] });
        expect(rule.keywords.some((keyword) => text.toLowerCase().includes(keyword.toLowerCase()))).toBe(true);
      }
    }
  }
});

test("no shipped rule finds other vendors' keys, a key cut short or run on, or cgk_ inside a longer word", () => {
  const key = generateKey();
  const near = [key.slice(0, -1), `${key}x`, `${key}_1`, `x${key}`, `my_${key}`, key.replace('cgk_', 'cgx_'), key.toUpperCase().replace('CGK_', 'CGX_')];
  for (const rule of rules()) {
    for (const text of [...OTHER_VENDORS, ...near, ...OTHER_VENDORS.map((other) => `OPENAI_API_KEY=${other}`)]) {
      expect({ where: rule.where, text, found: findAll(rule.regex, text, rule.group) }).toEqual({ where: rule.where, text, found: [] });
    }
  }
});

test("gitleaks' second rule finds keys of the form made before checksums, and only whole ones", () => {
  const legacy = gitleaksRules().find((rule) => rule.id === 'chatgate-api-key-legacy')!;
  const old = `cgk_${randomBytes(32).toString('base64url')}`;
  for (const text of contexts(old)) expect({ text, found: findAll(legacy.regex, text, legacy.secretGroup) }).toEqual({ text, found: [old] });
  for (const text of [`${old}A`, `x${old}`, old.slice(0, -1), ...OTHER_VENDORS]) expect({ text, found: findAll(legacy.regex, text, legacy.secretGroup) }).toEqual({ text, found: [] });
});

test('the secretlint CLI with the shipped config: a file holding a fresh key fails (naming the rule, not the key), one with an OpenAI key passes', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-secretlint-'));
  try {
    const key = generateKey();
    writeFileSync(path.join(dir, 'leaky.ts'), `const client = new OpenAI({ apiKey: '${key}', baseURL: 'https://gateway.example/v1' });\n`);
    writeFileSync(path.join(dir, 'other.ts'), `const client = new OpenAI({ apiKey: '${OTHER_VENDORS[0]}' });\n`);
    const secretlintCli = path.join(ROOT, 'node_modules', '.bin', 'secretlint');
    const config = ['--secretlintrc', path.join(DIR, 'secretlintrc.json'), '--no-maskSecrets'];
    // secretlint lints files under its working directory.
    const leaky = run(secretlintCli, [...config, 'leaky.ts'], { cwd: dir });
    expect(leaky.status).toBe(1);
    expect(leaky.output).toContain('chatgate API key');
    expect(leaky.output).toContain('leaky.ts');
    const clean = run(secretlintCli, [...config, 'other.ts'], { cwd: dir });
    expect({ status: clean.status, output: clean.output }).toEqual({ status: 0, output: '' });
    // Masked (secretlint's default), the finding does not print the key itself.
    const masked = run(secretlintCli, ['--secretlintrc', path.join(DIR, 'secretlintrc.json'), 'leaky.ts'], { cwd: dir });
    expect(masked.status).toBe(1);
    expect(masked.output).not.toContain(key);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
