/**
 * A newcomer's first minutes: `chatgate serve` with no configuration, in an empty directory, on the
 * embedded defaults (ports 8443, 9464 and 9100 for the mock worker). The printed curl line works as
 * printed; a second start reuses the certificate and the key store and prints no key.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CLI, stopProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

let cwd: string;

beforeAll(() => {
  cwd = mkdtempSync(path.join(os.tmpdir(), 'chatgate-defaults-'));
});
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

async function serveDefaults(): Promise<{ child: ChildProcess; banner: () => string }> {
  const env = { ...process.env };
  delete env.CHATGATE_CONFIG;
  const child = spawn(process.execPath, [CLI, 'serve'], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  child.stdout!.resume();
  await eventually(() => (stderr.includes('chatgate is serving') || child.exitCode !== null ? true : undefined), 15000);
  if (child.exitCode !== null) throw new Error(`chatgate serve exited: ${stderr}`);
  return { child, banner: () => stderr };
}

function sh(command: string): { status: number | null; stdout: string } {
  const result = spawnSync('bash', ['-c', command], { encoding: 'utf8', timeout: 15000 });
  return { status: result.status, stdout: result.stdout };
}

test('first start: a dev certificate, one key printed once, and a curl line that works as printed', async () => {
  const { child, banner } = await serveDefaults();
  try {
    const text = banner();
    const curlLine = text.split('\n').find((line) => line.trim().startsWith('curl -k https://localhost:8443/'))!.trim();
    const key = /Bearer (cgk_[A-Za-z0-9]{49})/.exec(curlLine)![1]!;

    const answer = sh(`${curlLine} -s`);
    expect(answer.status).toBe(0);
    expect(JSON.parse(answer.stdout).choices[0].message.content).toMatch(/^echo: Hello!/);

    // The same over plain HTTP fails and says why.
    const plain = sh(curlLine.replace('curl -k https://', 'curl -s http://'));
    expect(JSON.parse(plain.stdout).error.code).toBe('https_required');

    // Basic auth and streaming, as the README shows them.
    const viaBasic = sh(`curl -sk https://localhost:8443/v1/chat/completions -u '${key}:' -d '{"model":"mock/echo","stream":true,"messages":[{"role":"user","content":"Hi"}]}'`);
    expect(viaBasic.stdout.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(JSON.parse(sh('curl -sk https://localhost:8443/v1/chat/completions -d "{}"').stdout).error.code).toBe('missing_api_key');

    // What it printed about the certificate is true, and the store holds no clear key.
    const certFile = path.join(cwd, 'data', 'tls', 'cert.pem');
    expect(text).toContain(new X509Certificate(readFileSync(certFile)).fingerprint256);
    expect(statSync(path.join(cwd, 'data', 'tls', 'key.pem')).mode & 0o077).toBe(0);
    // The key store is SQLite (data/chatgate.db, and its write-ahead log beside it), mode 0600.
    const storeFiles = ['chatgate.db', 'chatgate.db-wal'].map((name) => path.join(cwd, 'data', name)).filter((file) => existsSync(file));
    expect(storeFiles[0]).toBe(path.join(cwd, 'data', 'chatgate.db'));
    for (const file of storeFiles) expect(readFileSync(file).toString('latin1')).not.toContain(key);
    expect(statSync(storeFiles[0]!).mode & 0o077).toBe(0);
    expect(existsSync(path.join(cwd, 'data', 'keys.json'))).toBe(false);
    expect((await fetch('http://127.0.0.1:9464/readyz')).status).toBe(200);

    // The console: the printed one-time link sets the first owner's password, who then signs in.
    const link = text.split('\n').find((line) => line.trim().startsWith('https://localhost:8443/console/#set-password='))!.trim();
    expect(text).toContain('Sign in to the console as admin@localhost');
    const token = link.split('#set-password=')[1]!;
    const origin = '-H "Origin: https://localhost:8443" -H "Content-Type: application/json"';
    const set = sh(`curl -sk https://localhost:8443/console/api/password ${origin} -d '{"token":"${token}","password":"the first owner password"}'`);
    expect(JSON.parse(set.stdout)).toEqual({ email: 'admin@localhost' });
    const signIn = sh(`curl -sk -i https://localhost:8443/console/api/session ${origin} -d '{"email":"admin@localhost","password":"the first owner password"}'`);
    expect(signIn.stdout).toMatch(/^set-cookie: __Host-chatgate_session=/im);
    expect(signIn.stdout).toContain('"account":{"id":"acc_default","name":"default","role":"owner"');
  } finally {
    await stopProcess(child);
  }
  expect({ code: child.exitCode, signal: child.signalCode }).toEqual({ code: 0, signal: null });
  // The mock worker went with it.
  await eventually(async () => ((await fetch('http://127.0.0.1:9100/health').catch(() => 'gone')) === 'gone' ? true : undefined));
});

test('second start: same certificate, no new key printed', async () => {
  const fingerprintBefore = new X509Certificate(readFileSync(path.join(cwd, 'data', 'tls', 'cert.pem'))).fingerprint256;
  const { child, banner } = await serveDefaults();
  try {
    expect(banner()).toContain(fingerprintBefore);
    expect(banner()).not.toMatch(/cgk_/);
    expect(banner()).not.toContain('set-password'); // the first owner set theirs
    expect(existsSync(path.join(cwd, 'data', 'chatgate.db'))).toBe(true);
  } finally {
    await stopProcess(child, 'SIGINT');
  }
  expect({ code: child.exitCode, signal: child.signalCode }).toEqual({ code: 0, signal: null });
});
