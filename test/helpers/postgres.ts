/**
 * Real PostgreSQL for tests: the server on 127.0.0.1:5432 when it answers, otherwise a throwaway one
 * started from the installed binaries (initdb into a temporary folder, a free port). Each test file
 * gets fresh databases, dropped afterwards.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './net';

const LOCAL = 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  url: string;
  drop(): Promise<void>;
}

let server: Promise<string> | undefined;

/** A fresh, empty database on the shared test server. */
export async function createTestDatabase(): Promise<TestDatabase> {
  server ??= findServer();
  const admin = await server;
  const name = `chatgate_test_${randomBytes(6).toString('hex')}`;
  await withClient(admin, (client) => client.query(`create database ${name}`));
  const url = admin.replace(/\/[^/]*$/, `/${name}`);
  return { url, drop: () => withClient(admin, (client) => client.query(`drop database if exists ${name} with (force)`)).then(() => undefined) };
}

async function findServer(): Promise<string> {
  if (await answers(LOCAL)) return LOCAL;
  const throwaway = await ThrowawayPostgres.start();
  process.once('exit', () => throwaway.stopSync());
  return throwaway.url;
}

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

/**
 * A relay to the database on a fixed loopback port: closed (connections refused) until open() is
 * called; close() cuts every connection through it and refuses new ones again.
 */
export function relayTo(databaseUrl: string, port: number) {
  const target = new URL(databaseUrl);
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
    }
    client.pipe(upstream).pipe(client);
  });
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return {
    url: url.href,
    open: () => new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve)),
    close: () => {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

/**
 * A relay to a database that holds every connection until released: a gateway starting on it waits
 * in its start-up (the key store's first query) for as long as the test likes.
 */
export interface HeldRelay {
  /** The database's URL, through the relay. */
  url: string;
  /** Resolves when the first connection reaches the relay. */
  firstConnection: Promise<void>;
  release(): void;
  close(): void;
}

export async function heldRelay(databaseUrl: string): Promise<HeldRelay> {
  const target = new URL(databaseUrl);
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let connected!: () => void;
  const firstConnection = new Promise<void>((resolve) => (connected = resolve));
  const sockets = new Set<net.Socket>();
  const relay = net.createServer((client) => {
    connected();
    sockets.add(client);
    void released.then(() => {
      const upstream = net.connect(Number(target.port), target.hostname);
      sockets.add(upstream);
      for (const socket of [client, upstream]) socket.on('error', () => undefined);
      client.pipe(upstream).pipe(client);
    });
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String((relay.address() as net.AddressInfo).port);
  return {
    url: url.href,
    firstConnection,
    release,
    close() {
      for (const socket of sockets) socket.destroy();
      relay.close();
    },
  };
}

/** A PostgreSQL server of the test's own, which it may stop and start (a database restart). */
export class ThrowawayPostgres {
  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  static async start(): Promise<ThrowawayPostgres> {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-pg-'));
    if (isRoot()) chownSync(dir, ...postgresUser());
    runAsPostgres(binary('initdb'), ['-D', path.join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync']);
    const instance = new ThrowawayPostgres(dir, await freePort());
    instance.startSync();
    return instance;
  }

  startSync(): void {
    runAsPostgres(binary('pg_ctl'), ['-D', path.join(this.dir, 'data'), '-l', path.join(this.dir, 'log'), '-w', '-o', `-p ${this.port} -h 127.0.0.1 -k ${this.dir} -F`, 'start']);
  }

  stopSync(): void {
    spawnSync(isRoot() ? 'runuser' : binary('pg_ctl'), isRoot() ? ['-u', 'postgres', '--', binary('pg_ctl'), '-D', path.join(this.dir, 'data'), '-m', 'fast', '-w', 'stop'] : ['-D', path.join(this.dir, 'data'), '-m', 'fast', '-w', 'stop']);
  }

  destroy(): void {
    this.stopSync();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function binary(name: string): string {
  try {
    const bindir = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
    if (existsSync(path.join(bindir, name))) return path.join(bindir, name);
  } catch {
    // no pg_config: look in Debian's place
  }
  const versions = existsSync('/usr/lib/postgresql') ? readdirSync('/usr/lib/postgresql').sort().reverse() : [];
  for (const version of versions) {
    const candidate = path.join('/usr/lib/postgresql', version, 'bin', name);
    if (existsSync(candidate)) return candidate;
  }
  throw new Error(`PostgreSQL's ${name} is not installed (Debian: apt-get install postgresql)`);
}

function isRoot(): boolean {
  return process.getuid?.() === 0;
}

function postgresUser(): [number, number] {
  return [Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }))];
}

/** initdb and postgres refuse to run as root. */
function runAsPostgres(command: string, args: string[]): void {
  const [file, argv] = isRoot() ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
  const result = spawnSync(file, argv, { encoding: 'utf8', timeout: 60_000 });
  if (result.status !== 0) throw new Error(`${command} failed: ${result.stderr || result.stdout}`);
}


/**
 * A key store the test can take away: a database of its own, reached through a relay on a free
 * loopback port. cut() ends every connection and refuses new ones (the store unreachable); drop()
 * cuts and drops the database.
 */
export async function cuttableStore(): Promise<{ keyStore: { type: 'postgres'; url: string }; cut(): void; drop(): Promise<void> }> {
  const database = await createTestDatabase();
  const relay = relayTo(database.url, await freePort());
  await relay.open();
  return {
    keyStore: { type: 'postgres', url: relay.url },
    cut: () => relay.close(),
    drop: async () => {
      relay.close();
      await database.drop();
    },
  };
}

/**
 * A relay to the database whose answers can be held back: hold() drops what the server sends until
 * release() (a query is run and committed, its answer never arrives); cut() ends every connection.
 */
export async function holdingRelay(target: URL) {
  const sockets = new Set<net.Socket>();
  let holding = false;
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
    }
    client.pipe(upstream);
    upstream.on('data', (chunk) => {
      if (!holding) client.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target.href);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.href,
    hold: () => (holding = true),
    release: () => (holding = false),
    cut: () => {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}
