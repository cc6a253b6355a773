/**
 * The listeners' sections: the public HTTPS listener (`listen`), the serving processes (`server`),
 * its certificate (`tls`), the plain-HTTP listener (`plainHttp`), the admin listener (`admin`), the
 * proxies whose forwarded headers are believed (`trustedProxies`), the limits every listener applies
 * to a request (`limits`) and the drain at shutdown (`shutdown`).
 */
import { availableParallelism } from 'node:os';
import proxyAddr from 'proxy-addr';
import { z } from 'zod';
import { count, host, milliseconds, port } from './parts';

export const listenSection = z
  .strictObject({
    host: host.default('0.0.0.0'),
    port: port.default(8443),
    /** Connections the kernel holds until the gateway accepts them (Linux caps it at net.core.somaxconn). */
    backlog: z.number().int().min(1).max(65535).default(4096),
  })
  .prefault({});

export const serverSection = z
  .strictObject({
    /** Serving processes on the same ports: a number, or auto (one per core). */
    processes: z
      .union([z.literal('auto'), z.number().int().min(1).max(256)])
      .default(1)
      .transform((value) => (value === 'auto' ? availableParallelism() : value)),
  })
  .prefault({});

export const tlsSection = z.strictObject({ cert: z.string().min(1), key: z.string().min(1) }).optional();

export const plainHttpSection = z.strictObject({ host: host.default('0.0.0.0'), port }).optional();

export const adminSection = z
  .strictObject({
    host: host.default('127.0.0.1'),
    port: port.default(9464),
    /**
     * Host names (besides IP addresses and localhost) the admin listener answers to; any other Host
     * header gets 403, so a page on another site cannot read it through DNS rebinding.
     */
    allowedHosts: z.array(z.string().min(1).transform((name) => name.toLowerCase())).default([]),
    /** Guards /admin/api and the console. Absent: both are off. */
    token: z
      .string()
      .min(16, 'must be at least 16 characters')
      .regex(/^[A-Za-z0-9\-._~+/]+=*$/, 'must be letters, digits and - . _ ~ + / only (it is sent as a Bearer token; a space or # could never match)')
      .optional(),
  })
  .prefault({});

export const trustedProxiesSection = z
  .array(z.string().min(1))
  .default([])
  .superRefine((entries, ctx) => {
    for (const [index, entry] of entries.entries()) {
      try {
        proxyAddr.compile([entry]);
      } catch {
        ctx.addIssue({ code: 'custom', path: [index], message: `'${entry}' is not an IP address, a CIDR range or loopback/linklocal/uniquelocal` });
      }
    }
  });

export const limitsSection = z
  .strictObject({
    maxBodyBytes: count.default(16 * 1024 * 1024),
    /** JSON bodies are scanned before they are parsed: arrays and objects nested deeper than this get 400 ... */
    maxJsonDepth: count.default(64),
    /** ... as do bodies with more values (array elements and object members) than this. */
    maxJsonElements: count.default(1_000_000),
    maxHeaders: count.default(100),
    headersTimeoutMs: milliseconds.default(10_000),
    requestTimeoutMs: milliseconds.default(60_000),
    keepAliveTimeoutMs: milliseconds.default(5_000),
  })
  .prefault({});

export const shutdownSection = z.strictObject({ drainTimeoutMs: milliseconds.default(30_000) }).prefault({});
