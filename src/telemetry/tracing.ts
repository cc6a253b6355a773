/**
 * Optional OpenTelemetry export: one SERVER span per request, sent over OTLP/HTTP in batches. The span
 * carries the ids the trace stage chose (the worker already got them in traceparent), so the exported
 * tree matches what travelled: client span -> gateway span -> worker span. Recorded when the answer is
 * over, from what the stages noted on the request context; nothing here runs before that.
 */
import type { Attributes } from '@opentelemetry/api';
import type { Endpoint } from '../common/endpoints';
import { withoutKeys } from '../common/key-shape';
import type { Config } from '../config';
import type { RequestContext } from '../context';

export interface FinishedRequest {
  method: string;
  path: string;
  status: number;
  /** performance.now() when the answer was over. */
  endedAt: number;
}

export interface SpanExport {
  record(context: RequestContext, request: FinishedRequest): void;
  shutdown(): Promise<void>;
}

/**
 * The SDK and its exporter are loaded only when spans are exported: about 250 modules and 3 MiB of
 * heap that every serving process would otherwise carry unused (test/gateway/lazy-modules.test.ts).
 */
export async function createSpanExport(settings: Config['tracing']): Promise<SpanExport | undefined> {
  if (!settings.otlpEndpoint) return undefined;
  const [{ ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, trace }, { OTLPTraceExporter }, { resourceFromAttributes }, { BatchSpanProcessor, RandomIdGenerator, TracerProvider }] =
    await Promise.all([import('@opentelemetry/api'), import('@opentelemetry/exporter-trace-otlp-http'), import('@opentelemetry/resources'), import('@opentelemetry/sdk-trace')]);

  /** Hands the SDK the ids the request already has; it asks synchronously inside startSpan. */
  class ChosenIds extends RandomIdGenerator {
    traceId: string | undefined;
    spanId: string | undefined;
    override generateTraceId = () => this.take('traceId') ?? new RandomIdGenerator().generateTraceId();
    override generateSpanId = () => this.take('spanId') ?? new RandomIdGenerator().generateSpanId();
    private take(which: 'traceId' | 'spanId'): string | undefined {
      const id = this[which];
      this[which] = undefined;
      return id;
    }
  }
  const ids = new ChosenIds();
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': settings.serviceName }),
    idGenerator: ids,
    spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url: settings.otlpEndpoint }), scheduledDelayMillis: 1000 })],
  });
  const tracer = provider.getTracer('chatgate');
  const wallClock = (monotonic: number) => performance.timeOrigin + monotonic;

  return {
    record(context, request) {
      const traced = context.trace;
      if (!traced) return;
      const parent = traced.parentSpanId
        ? trace.setSpanContext(ROOT_CONTEXT, { traceId: traced.traceId, spanId: traced.parentSpanId, traceFlags: Number.parseInt(traced.flags, 16) & TraceFlags.SAMPLED, isRemote: true })
        : ROOT_CONTEXT;
      ids.traceId = traced.traceId;
      ids.spanId = traced.spanId;
      const path = withoutKeys(request.path);
      const span = tracer.startSpan(`${request.method} ${path}`, { kind: SpanKind.SERVER, startTime: wallClock(context.arrivedAt), attributes: attributesOf(context, request, path) }, parent);
      ids.traceId = ids.spanId = undefined;
      if (request.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: context.errorCode });
      span.end(wallClock(request.endedAt));
    },
    shutdown: () => provider.shutdown(),
  };
}

/** OpenTelemetry's HTTP and GenAI attribute names; the key by id only. */
/** OpenTelemetry's gen_ai.operation.name for each endpoint. */
const OPERATION_NAMES: Readonly<Record<Endpoint, string>> = { chat: 'chat', completions: 'text_completion', embeddings: 'embeddings', responses: 'responses' };

function attributesOf(context: RequestContext, request: FinishedRequest, path: string): Attributes {
  const attributes: Attributes = {
    'http.request.method': request.method,
    'url.path': path,
    'http.response.status_code': request.status,
    'chatgate.request_id': context.requestId,
  };
  const optional: Attributes = {
    'chatgate.key_id': context.key?.id,
    'chatgate.provider': context.target?.provider,
    'chatgate.worker': context.worker,
    'error.type': context.errorCode,
    'gen_ai.operation.name': context.modelRequest && OPERATION_NAMES[context.modelRequest.endpoint],
    'gen_ai.request.model': context.modelRequest && withoutKeys(context.modelRequest.model),
    'chatgate.alias': context.target?.alias,
    'chatgate.target_model': context.target && withoutKeys(context.target.modelName),
    'gen_ai.usage.input_tokens': context.usage?.promptTokens,
    'gen_ai.usage.output_tokens': context.usage?.completionTokens,
  };
  for (const [name, value] of Object.entries(optional)) if (value !== undefined) attributes[name] = value;
  return attributes;
}
