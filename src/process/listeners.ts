/**
 * Listeners: the public HTTPS listener, the optional plain-HTTP listener (same app; its transport
 * guard refuses everything but trusted proxies' X-Forwarded-Proto: https), and the admin listener.
 *
 * Plain HTTP sent to the HTTPS port: OpenSSL recognises an HTTP request where a TLS handshake should
 * be (ERR_SSL_HTTP_REQUEST). Rather than drop the connection, which a client shows as an obscure TLS
 * error, we answer on the raw socket in plain HTTP with 403 https_required and close. Nothing of the
 * request is read beyond what the TLS layer already looked at, and nothing is proxied.
 */
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { RequestListener, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { Config } from '../config';
import { errors, type GatewayError } from '../errors';
import { ExpressRequest, ExpressResponse } from '../tuning/express-prototypes';

/** How often node checks headersTimeout/requestTimeout against open connections. */
const TIMEOUT_CHECK_INTERVAL_MS = 1000;

export interface TlsMaterial {
  cert: string | Buffer;
  key: string | Buffer;
}

export interface Listeners {
  readonly publicAddress: AddressInfo;
  readonly plainAddress: AddressInfo | undefined;
  /** Absent in a cluster worker: the primary process serves the admin listener. */
  readonly adminAddress: AddressInfo | undefined;
  /** Stop accepting, let open requests finish up to the deadline, then cut what is left. */
  drain(deadlineMs: number): Promise<{ cut: number }>;
  /** Close the admin listener (last, so /readyz can say "not ready" while draining). */
  closeAdmin(): Promise<void>;
}

export interface ListenerEvents {
  /** Plain HTTP arrived on the HTTPS port and was refused. */
  plainHttpRefused(client: string | undefined): void;
  /** Node's HTTP parser refused a request (framing, header size, too slow); it was answered with this code. */
  clientErrorRefused(code: string): void;
}

export async function openListeners(
  config: Pick<Config, 'listen' | 'plainHttp' | 'admin' | 'limits'>,
  apps: { publicApp: RequestListener; adminApp: RequestListener | undefined },
  tls: TlsMaterial,
  events: ListenerEvents,
): Promise<Listeners> {
  const timeouts = {
    headersTimeout: config.limits.headersTimeoutMs,
    requestTimeout: config.limits.requestTimeoutMs,
    keepAliveTimeout: config.limits.keepAliveTimeoutMs,
    maxHeadersCount: config.limits.maxHeaders + 1, // one over, so transport.ts sees the excess and refuses it
    connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
  };
  const expressClasses = { IncomingMessage: ExpressRequest, ServerResponse: ExpressResponse };
  const sockets = new Set<Socket>();
  const secureServer = https.createServer(
    { ...timeouts, ...expressClasses, ...tls, minVersion: 'TLSv1.2', handshakeTimeout: config.limits.headersTimeoutMs, noDelay: true },
    apps.publicApp,
  );
  secureServer.on('connection', (socket: Socket) => track(sockets, socket));
  const onClientError = (err: NodeJS.ErrnoException, socket: Socket) => {
    const code = answerClientError(err, socket);
    if (code) events.clientErrorRefused(code);
  };
  secureServer.on('clientError', onClientError);
  secureServer.on('tlsClientError', (err: NodeJS.ErrnoException, tlsSocket: TLSSocket) => {
    if (err.code === 'ERR_SSL_HTTP_REQUEST' && refusePlainHttp(tlsSocket)) events.plainHttpRefused(tlsSocket.remoteAddress);
  });
  const publicAddress = await listen(secureServer, config.listen.port, config.listen.host, config.listen.backlog);

  let plainServer: http.Server | undefined;
  let plainAddress: AddressInfo | undefined;
  if (config.plainHttp) {
    plainServer = http.createServer({ ...timeouts, ...expressClasses, noDelay: true }, apps.publicApp);
    plainServer.on('connection', (socket: Socket) => track(sockets, socket));
    plainServer.on('clientError', onClientError);
    plainAddress = await listen(plainServer, config.plainHttp.port, config.plainHttp.host);
  }
  const admin = apps.adminApp ? await openAdminListener(config, apps.adminApp) : undefined;

  return {
    publicAddress,
    plainAddress,
    adminAddress: admin?.address,
    async drain(deadlineMs) {
      secureServer.close();
      plainServer?.close();
      const deadline = Date.now() + deadlineMs;
      while (sockets.size > 0 && Date.now() < deadline) {
        secureServer.closeIdleConnections();
        plainServer?.closeIdleConnections();
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const cut = sockets.size;
      for (const socket of sockets) socket.destroy();
      return { cut };
    },
    closeAdmin: async () => admin?.close(),
  };
}

export async function openAdminListener(config: Pick<Config, 'admin'>, app: RequestListener): Promise<{ address: AddressInfo; close(): Promise<void> }> {
  const server = http.createServer(app);
  const address = await listen(server, config.admin.port, config.admin.host);
  return {
    address,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Answer in plain HTTP on the TCP socket under a TLS socket whose handshake turned out to be HTTP. */
function refusePlainHttp(tlsSocket: TLSSocket): boolean {
  const raw = (tlsSocket as TLSSocket & { _parent?: Socket })._parent;
  if (!raw || raw.destroyed || !raw.writable) return false;
  raw.end(rawErrorResponse(errors.httpsRequired(), 'Forbidden'));
  return true;
}

/**
 * A request Node's HTTP parser refused (broken framing, headers too large, too slow) never reaches the
 * app; its answer is still the OpenAI error body, then the connection closes (its framing is unknown).
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket): string | undefined {
  // A parse error in a body (bad chunk framing) comes after the request reached the app: its answer
  // has not started, so this one goes out instead, and the app's later attempt meets a closed socket.
  const answer = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
  const refusal = refusalForClientError(err.code);
  if (!refusal || !socket.writable || answer?.headersSent) {
    socket.destroy();
    return undefined;
  }
  socket.end(rawErrorResponse(refusal.error, refusal.reason));
  return refusal.error.code;
}

/**
 * Pure: what a 'clientError' from Node's HTTP server is answered with. Only the parser's own verdicts
 * (HPE_*) and its timeout speak of the client's request; anything else (a reset, a TLS handshake the
 * server itself was too busy to finish in time) gets no answer: the connection is closed.
 */
export function refusalForClientError(code: string | undefined): { error: GatewayError; reason: string } | undefined {
  if (code === 'HPE_HEADER_OVERFLOW') return { error: errors.headersTooLarge(), reason: 'Request Header Fields Too Large' };
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return { error: errors.requestTimeout(), reason: 'Request Timeout' };
  if (code?.startsWith('HPE_')) return { error: errors.malformedRequest(), reason: 'Bad Request' };
  return undefined;
}

function rawErrorResponse(error: GatewayError, reason: string): string {
  const body = JSON.stringify(error.toBody());
  return (
    `HTTP/1.1 ${error.status} ${reason}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    'Connection: close\r\n\r\n' +
    body
  );
}

function track(sockets: Set<Socket>, socket: Socket): void {
  sockets.add(socket);
  socket.once('close', () => sockets.delete(socket));
}

function listen(server: http.Server, port: number, host: string, backlog?: number): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host, backlog }, () => {
      server.removeListener('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}
