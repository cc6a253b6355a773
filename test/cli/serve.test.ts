/**
 * `chatgate serve` that cannot start: a bad config fails with the field named, and a start that fails
 * after the mock worker started leaves no mock worker behind.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { cliGateway, chatgate } from '../helpers/cli';

const f = cliGateway();

describe('a bad config fails at start with the field named', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const write = (name: string, document: unknown) => {
    const file = path.join(dir, name);
    writeFileSync(file, typeof document === 'string' ? document : YAML.stringify(document));
    return file;
  };

  test.each([
    ['a port out of range', { listen: { port: 70000 }, providers: { mock: { workers: ['http://127.0.0.1:1'] } } }, 'listen.port'],
    ['a worker that is not a URL', { providers: { mock: { workers: ['not a url'] } } }, 'providers.mock.workers[0]'],
    ['a misspelt setting', { lsten: { port: 1 }, providers: { mock: { workers: ['http://127.0.0.1:1'] } } }, 'lsten'],
    ['no providers', { providers: {} }, 'providers'],
    ['an upstream key variable that is not set', { providers: { mock: { workers: ['http://127.0.0.1:1'], apiKeyEnv: 'CHATGATE_TEST_UNSET_VAR' } } }, 'CHATGATE_TEST_UNSET_VAR'],
    ['YAML that does not parse', 'listen: { port: [', 'not valid YAML'],
  ])('%s', (name, document, named) => {
    const file = write(`${name.replace(/\W+/g, '-')}.yaml`, document);
    for (const run of [() => chatgate(['serve', '--config', file]), () => chatgate(['serve'], { CHATGATE_CONFIG: file })]) {
      const result = run();
      expect(result.status).toBe(1);
      expect(result.stderr).toContain(named);
      expect(result.stderr).not.toMatch(/\n\s+at /); // a message, not a stack trace
    }
  });
});

test('serve that fails after starting the mock worker (its port taken) exits 1 with the reason, and leaves no mock worker behind', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-cli-'));
  try {
    const busyPort = Number(new URL(f.gw.url).port); // the running gateway holds it
    const mockPort = 20000 + Math.floor(Math.random() * 20000);
    const file = path.join(dir, 'config.yaml');
    writeFileSync(
      file,
      YAML.stringify({ listen: { host: '127.0.0.1', port: busyPort }, admin: { host: '127.0.0.1', port: 0 }, dataDir: dir, mockWorker: { host: '127.0.0.1', port: mockPort }, providers: { mock: { workers: [`http://127.0.0.1:${mockPort}`] } } }),
    );
    const served = chatgate(['serve', '--config', file]);
    expect(served.status).toBe(1); // not killed by spawnSync's 20 s timeout: it exited by itself
    expect(served.stderr).toContain('EADDRINUSE');
    const probe = spawnSync('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '2', `http://127.0.0.1:${mockPort}/health`], { encoding: 'utf8' });
    expect(probe.stdout).toBe('000'); // the mock worker went with it
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
