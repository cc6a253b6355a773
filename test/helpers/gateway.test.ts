/** The test gateway helper: a gateway a test leaves running is stopped after that test; one started in beforeAll is not. */
import { startTestGateway, type TestGateway } from './gateway';

const settings = { providers: { mock: { workers: ['http://127.0.0.1:9'] } } };
let kept: TestGateway;
let leftBehind: TestGateway;

beforeAll(async () => {
  kept = await startTestGateway(settings);
});
afterAll(async () => {
  await kept.stop();
});

test('a test that leaves its gateway running', async () => {
  leftBehind = await startTestGateway(settings);
  expect((await fetch(`${leftBehind.adminUrl}/healthz`)).status).toBe(200);
});

test('the next test finds that gateway stopped, and the one from beforeAll still serving', async () => {
  await expect(fetch(`${leftBehind.adminUrl}/healthz`)).rejects.toThrow();
  expect((await fetch(`${kept.adminUrl}/healthz`)).status).toBe(200);
});
