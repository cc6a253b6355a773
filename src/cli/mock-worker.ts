/**
 * `chatgate mock-worker`: the OpenAI-compatible mock worker, loaded only for this command.
 */
import { parse, positiveNumber, wholeNumber } from './flags';

export async function mockWorker(args: string[]): Promise<number> {
  const { values } = parse(args, {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '9100' },
    'latency-ms': { type: 'string', default: '0' },
    'tokens-per-second': { type: 'string', default: '50' },
    'log-requests': { type: 'boolean', default: false },
  });
  const { runMockWorker } = await import('../mock-worker/main.js');
  runMockWorker(values.host, wholeNumber('--port', values.port), {
    latencyMs: wholeNumber('--latency-ms', values['latency-ms']),
    tokensPerSecond: positiveNumber('--tokens-per-second', values['tokens-per-second']),
    ...(values['log-requests'] ? { onRequest: (id) => process.stdout.write(`${JSON.stringify({ msg: 'request', requestId: id ?? null })}\n`) } : {}),
  });
  return -1; // keeps running
}
