/**
 * The model servers: upstream defaults (`upstream`), the providers and their workers (`providers`),
 * public model names (`models`) and the mock worker (`mockWorker`). Their building blocks (workers,
 * upstream settings, forwarded headers, aliases) are in parts.ts.
 */
import { z } from 'zod';
import { alias, host, port, provider, upstreamSettings } from './parts';

export const upstreamSection = upstreamSettings(true).prefault({});

export const providersSection = z
  .record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'provider names are letters, digits, ".", "_" and "-"'), provider)
  .refine((providers) => Object.keys(providers).length > 0, 'at least one provider is required');

/** Public model names (`gpt-4o`) for configured models, so clients written against other names run unchanged. */
export const modelsSection = z
  .strictObject({
    aliases: z.record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/, 'alias names are letters, digits, ".", "_", ":", "/" and "-", at most 128'), alias).default({}),
  })
  .prefault({});

export const mockWorkerSection = z
  .strictObject({
    host: host.default('127.0.0.1'),
    port: port.default(9100),
    latencyMs: z.number().int().min(0).default(0),
    tokensPerSecond: z.number().positive().default(50),
  })
  .optional();
