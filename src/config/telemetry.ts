/** What the gateway tells: logs (`log`) and traces (`tracing`). */
import { z } from 'zod';
import { workerUrl } from './parts';

export const logSection = z
  .strictObject({
    level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** stdout, stderr, or a file path (appended to). */
    destination: z.string().min(1).default('stdout'),
    /** One line per request at level info. */
    access: z.boolean().default(true),
  })
  .prefault({});

export const tracingSection = z
  .strictObject({
    /** OTLP/HTTP traces endpoint (…/v1/traces); absent: no spans are exported. */
    otlpEndpoint: workerUrl.optional(),
    serviceName: z.string().min(1).default('chatgate'),
  })
  .prefault({});
