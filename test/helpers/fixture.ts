/**
 * The usual integration setup in one call: a real mock-worker process, a gateway whose provider
 * `mock` points at it (plus any settings given), one key; the worker's record cleared before each test.
 */
import { startTestGateway, type TestGateway } from './gateway';
import { startWorker, type WorkerProcess } from './processes';

export interface GatewayFixture {
  worker: WorkerProcess;
  gw: TestGateway;
  key: string;
}

export function gatewayWithWorker(settings: Record<string, unknown> = {}): GatewayFixture {
  const fixture = {} as GatewayFixture;
  beforeAll(async () => {
    fixture.worker = await startWorker();
    fixture.gw = await startTestGateway({ providers: { mock: { workers: [fixture.worker.url] } }, ...settings });
    fixture.key = (await fixture.gw.issueKey()).key;
  });
  afterAll(async () => {
    await fixture.gw?.stop();
    await fixture.worker?.stop();
  });
  beforeEach(() => fixture.worker.clear());
  return fixture;
}
