/**
 * Cluster mode (`server.processes` > 1): this primary process prepares what exists once, keeps N
 * serving processes running on the shared public ports (node:cluster; a process that dies is
 * replaced), and serves the admin listener: /metrics adds up every serving process's metrics
 * (prom-client's cluster aggregation), /readyz asks each of them, and key changes made through the
 * admin API are passed to their caches at once.
 */
import cluster, { type Worker } from 'node:cluster';
import path from 'node:path';
import { AggregatorRegistry } from 'prom-client';
import { Alerts, alertSettings } from '../accounts/alerts';
import { createAdminApp } from '../admin/app';
import { judgeReadiness, PING_DEADLINE_MS, within, type Readiness } from '../admin/readiness';
import type { Config } from '../config';
import type { Logger } from '../telemetry/log';
import { accountParts, banner, prepareOnce, reloadConfig, type Gateway } from './startup';
import { createMetrics } from '../telemetry/metrics';
import { openAdminListener } from './listeners';

export type WorkerMessages = { type: 'chatgate:readiness'; id: number } | { type: 'chatgate:key-changes'; digests: string[] | undefined };
type PrimaryMessages = { type: 'chatgate:readiness'; id: number; answer: Readiness } | { type: 'chatgate:serving'; port: number };

const RESTART_DELAYS_MS = [100, 500, 1000, 5000];
/** A serving process answers within its own ping deadline; past this it counts as not ready. */
const READINESS_TIMEOUT_MS = PING_DEADLINE_MS + 200;

export async function startPrimary(config: Config, log: Logger, out: NodeJS.WritableStream, configFile: string): Promise<Gateway> {
  const { tls, keyStore, firstKey, firstOwner, mockWorker } = await prepareOnce(config, log);
  const wanted = config.server.processes;
  const workers = new Set<Worker>();
  let stopping = false;
  let restarts = 0;
  let readinessRequest = 0;
  let publicPort = config.listen.port;

  // Round-robin (Node's default on Linux): the primary accepts and hands each connection over, which
  // keeps the processes evenly loaded (1,000 requests on 10 keep-alive connections: 400/597). With
  // SCHED_NONE the split was 599/400 on an idle machine but worse than 300/700 under CI load. The price
  // of round-robin: a connection handed to a process at the instant it dies stays open in the primary
  // until the client gives up (docs/configuration.md, cluster mode).
  cluster.schedulingPolicy = cluster.SCHED_RR;
  cluster.setupPrimary({ exec: path.join(__dirname, '..', 'cli.js'), args: ['serve', ...(configFile ? ['--config', configFile] : [])] });

  const fork = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const worker = cluster.fork();
      workers.add(worker);
      const onServing = (message: PrimaryMessages) => {
        if (message?.type !== 'chatgate:serving') return;
        publicPort = message.port;
        worker.off('message', onServing);
        log.info({ pid: worker.process.pid }, 'serving process started');
        resolve();
      };
      worker.on('message', onServing);
      worker.once('exit', (code, signal) => {
        workers.delete(worker);
        reject(new Error(`serving process exited before serving (code ${code}, signal ${signal})`));
        if (stopping) return;
        const delay = RESTART_DELAYS_MS[Math.min(restarts++, RESTART_DELAYS_MS.length - 1)];
        log.error({ pid: worker.process.pid, code, signal, restartInMs: delay }, 'serving process died; replacing it');
        setTimeout(() => {
          if (!stopping) fork().then(() => (restarts = 0), () => undefined);
        }, delay).unref();
      });
    });
  await Promise.all(Array.from({ length: wanted }, fork));

  keyStore.onChange((digests) => {
    for (const worker of workers) tell(worker, { type: 'chatgate:key-changes', digests });
  });

  const aggregator = new AggregatorRegistry();
  let accepting = true;
  const readiness = async (): Promise<Readiness> => {
    const [answers, keyStoreAnswers] = await Promise.all([
      Promise.all([...workers].map((worker) => askReadiness(worker, ++readinessRequest))),
      within(
        PING_DEADLINE_MS,
        keyStore.ping().then(() => true),
        false,
      ),
    ]);
    const answered = answers.filter((answer): answer is Readiness => answer !== undefined);
    const rateLimitStores = answered.map((answer) => answer.checks.rateLimitStore).filter((state) => state !== undefined);
    return judgeReadiness({
      accepting,
      keyStoreAnswers,
      // Each serving process has its own cache: the best of them says what the replica can still serve.
      servableKeys: Math.max(0, ...answered.map((answer) => Number(answer.checks.cachedKeys) || 0)),
      providers: (answered[0]?.checks.providers as Record<string, boolean> | undefined) ?? {},
      rateLimitStore: rateLimitStores.length > 0 ? rateLimitStores.every((state) => state === 'up') : undefined,
      processes: { wanted, running: workers.size, ready: answered.filter((answer) => answer.ready).length },
    });
  };
  const metrics = createMetrics();
  // The admin API's leak reports (POST /admin/api/keys/leaked) tell the owners from here.
  const people = accountParts(config, log, keyStore);
  const leakAlerts = new Alerts(keyStore, people.auditor, alertSettings(config), log);
  people.accounts.leaks.onRevoked = (key, where) => leakAlerts.keyLeaked(key, where);
  const admin = await openAdminListener(
    config,
    createAdminApp({ metrics, log, accounts: people.accounts, currency: () => config.prices.currency, adminToken: config.admin.token, allowedHosts: config.admin.allowedHosts, exposition: () => aggregator.clusterMetrics(), readiness }),
    { clientErrorRefused: (code) => metrics.errors.series({ code }).inc() },
  );

  log.info({ role: 'primary', processes: wanted, https: `${config.listen.host}:${publicPort}`, admin: `${admin.address.address}:${admin.address.port}` }, 'chatgate listening');
  out.write(banner(config, publicPort, admin.address, tls, { firstKey: firstKey?.key, firstOwner }));

  return {
    config,
    listeners: {
      publicAddress: { address: config.listen.host, family: 'IPv4', port: publicPort },
      plainAddress: undefined,
      adminAddress: admin.address,
      drain: async () => ({ cut: 0 }),
      closeAdmin: () => admin.close(),
    },
    async reload() {
      // Checked here once, so a bad file is refused with one log line; each serving process then reloads.
      const next = configFile ? reloadConfig(configFile, config, log) : undefined;
      if (!next) return false;
      leakAlerts.configure(alertSettings(next));
      for (const worker of workers) worker.process.kill('SIGHUP');
      return true;
    },
    async shutdown() {
      stopping = true;
      accepting = false;
      log.info({ deadlineMs: config.shutdown.drainTimeoutMs }, 'draining every serving process');
      await Promise.all(
        [...workers].map(
          (worker) =>
            new Promise<void>((resolve) => {
              // worker.kill() would first wait for a disconnect that a blocked process never gives.
              const force = setTimeout(() => worker.process.kill('SIGKILL'), config.shutdown.drainTimeoutMs + 5000);
              worker.once('exit', () => {
                clearTimeout(force);
                resolve();
              });
              worker.process.kill('SIGTERM');
            }),
        ),
      );
      await admin.close();
      await leakAlerts.stop();
      await mockWorker?.stop();
      await keyStore.close();
      log.info('stopped');
      log.flush();
    },
  };
}

function askReadiness(worker: Worker, id: number): Promise<Readiness | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => done(undefined), READINESS_TIMEOUT_MS);
    const onMessage = (message: PrimaryMessages) => {
      if (message?.type === 'chatgate:readiness' && message.id === id) done(message.answer);
    };
    const done = (answer: Readiness | undefined) => {
      clearTimeout(timer);
      worker.off('message', onMessage);
      resolve(answer);
    };
    worker.on('message', onMessage);
    if (!tell(worker, { type: 'chatgate:readiness', id }, () => done(undefined))) done(undefined);
  });
}

/**
 * Send a message to a serving process unless its channel is closed. A serving process disconnects
 * before it exits; `send` to it then throws, or without a callback raises an uncaught exception that
 * would take the primary down. False when not sent; `onFailure` when sending fails later.
 */
export function tell(worker: Pick<Worker, 'isConnected' | 'send'>, message: WorkerMessages, onFailure: () => void = () => undefined): boolean {
  if (!worker.isConnected()) return false;
  try {
    worker.send(message, (err: Error | null) => {
      if (err) onFailure();
    });
    return true;
  } catch {
    return false;
  }
}
