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
import net, { type AddressInfo, type Socket } from 'node:net';
import type { RequestListener, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { Config } from '../config';
import { errors, type GatewayError } from '../errors';
import { ExpressRequest, ExpressResponse } from '../tuning/express-prototypes';

/** How often node checks headersTimeout/requestTimeout against open connections. */
const TIMEOUT_CHECK_INTERVAL_MS = 1000;

/**
 * Mozilla's "intermediate" TLS 1.2 suites (TLS 1.3's are all forward-secret AEADs): ECDHE or DHE key
 * exchange only, AES-GCM or ChaCha20-Poly1305 only; no RSA key exchange, no CBC, no SHA-1 MACs.
 * The client's order is followed, as Mozilla recommends for this profile.
 */
export const TLS_CIPHERS = [
  'TLS_AES_128_GCM_SHA256',
  'TLS_AES_256_GCM_SHA384',
  'TLS_CHACHA20_POLY1305_SHA256',
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
  'DHE-RSA-AES128-GCM-SHA256',
  'DHE-RSA-AES256-GCM-SHA384',
  'DHE-RSA-CHACHA20-POLY1305',
].join(':');

export interface TlsMaterial {
  cert: string | Buffer;
  key: string | Buffer;
}

export interface Listeners {
  readonly publicAddress: AddressInfo;
  readonly plainAddress: AddressInfo | undefined;
  /** Absent in a cluster worker: the primary process serves the admin listener. */
  readonly adminAddress: AddressInfo | undefined;
  /**
   * Stop accepting, let open requests finish up to the deadline, then cut what is left. While it
   * drains, every answer says `Connection: close`, so no new request comes on an old connection, and
   * only idle connections are closed (never one a request has started to arrive on).
   */
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

/** The same limits on every listener, the admin one included: a slow client holds none of them longer. */
function timeoutsOf(limits: Config['limits']) {
  return {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    maxHeadersCount: limits.maxHeaders + 1, // one over, so transport.ts sees the excess and refuses it
    connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
  };
}

export async function openListeners(
  config: Pick<Config, 'listen' | 'plainHttp' | 'admin' | 'limits'>,
  apps: { publicApp: RequestListener; adminApp: RequestListener | undefined },
  tls: TlsMaterial,
  events: ListenerEvents,
): Promise<Listeners> {
  const timeouts = timeoutsOf(config.limits);
  const expressClasses = { IncomingMessage: ExpressRequest, ServerResponse: ExpressResponse };
  const sockets = new Set<Socket>();
  /** The sockets HTTP is read from (for TLS, the TLS socket over the TCP one), to reach the answer under way on each. */
  const httpSockets = new Set<Socket>();
  let draining = false;
  // While draining, an answer that has not started yet says Connection: close (Node then closes the
  // connection once it is sent); answers under way when the drain begins are told as it begins.
  const publicApp: RequestListener = (req, res) => {
    if (draining) res.setHeader('Connection', 'close');
    apps.publicApp(req, res);
  };
  const secureServer = https.createServer(
    { ...timeouts, ...expressClasses, ...tls, minVersion: 'TLSv1.2', ciphers: TLS_CIPHERS, honorCipherOrder: false, handshakeTimeout: config.limits.headersTimeoutMs, noDelay: true },
    publicApp,
  );
  secureServer.on('connection', (socket: Socket) => track(sockets, socket));
  secureServer.on('secureConnection', (socket: TLSSocket) => track(httpSockets, socket));
  const onClientError = clientErrorAnswerer(events);
  secureServer.on('clientError', onClientError);
  secureServer.on('tlsClientError', (err: NodeJS.ErrnoException, tlsSocket: TLSSocket) => {
    if (err.code === 'ERR_SSL_HTTP_REQUEST' && refusePlainHttp(tlsSocket)) events.plainHttpRefused(tlsSocket.remoteAddress);
  });
  const publicAddress = await listen(secureServer, config.listen.port, config.listen.host, config.listen.backlog);

  let plainServer: http.Server | undefined;
  let plainAddress: AddressInfo | undefined;
  if (config.plainHttp) {
    plainServer = http.createServer({ ...timeouts, ...expressClasses, noDelay: true }, publicApp);
    plainServer.on('connection', (socket: Socket) => {
      track(sockets, socket);
      track(httpSockets, socket);
    });
    plainServer.on('clientError', onClientError);
    plainAddress = await listen(plainServer, config.plainHttp.port, config.plainHttp.host);
  }
  const admin = apps.adminApp ? await openAdminListener(config, apps.adminApp, events) : undefined;

  return {
    publicAddress,
    plainAddress,
    adminAddress: admin?.address,
    async drain(deadlineMs) {
      draining = true;
      for (const socket of httpSockets) {
        const answer = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
        if (answer && !answer.headersSent) answer.setHeader('Connection', 'close');
      }
      // Stop accepting, but without http.Server.close()'s closing of idle connections: a client
      // sending back to back has, at any instant, a connection that looks idle with its next request
      // on the wire, and closing it then resets that request. Busy connections close themselves
      // after the answer they are on (Connection: close); those still idle after the grace are closed.
      stopAccepting(secureServer);
      if (plainServer) stopAccepting(plainServer);
      const started = Date.now();
      const deadline = started + deadlineMs;
      while (sockets.size > 0 && Date.now() < deadline) {
        if (Date.now() - started >= DRAIN_IDLE_GRACE_MS) {
          secureServer.closeIdleConnections();
          plainServer?.closeIdleConnections();
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const cut = sockets.size;
      for (const socket of sockets) socket.destroy();
      secureServer.close(); // clears the server's own timers
      plainServer?.close();
      return { cut };
    },
    closeAdmin: async () => admin?.close(),
  };
}

export async function openAdminListener(
  config: Pick<Config, 'admin' | 'limits'>,
  app: RequestListener,
  events: Pick<ListenerEvents, 'clientErrorRefused'>,
): Promise<{ address: AddressInfo; close(): Promise<void> }> {
  const server = http.createServer({ ...timeoutsOf(config.limits), noDelay: true }, app);
  server.on('clientError', clientErrorAnswerer(events));
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

function clientErrorAnswerer(events: Pick<ListenerEvents, 'clientErrorRefused'>) {
  return (err: NodeJS.ErrnoException, socket: Socket) => {
    const code = answerClientError(err, socket);
    if (code) events.clientErrorRefused(code);
  };
}

/**
 * While draining, a connection still idle this long after the drain began is closed. By then every
 * client that was sending has been told Connection: close on its next answer; one that sends again
 * after a longer pause could still meet the close, as it could meet keepAliveTimeout at any time.
 */
const DRAIN_IDLE_GRACE_MS = 1000;

/** net.Server's close: no new connections; unlike http.Server's, it leaves open ones alone. */
function stopAccepting(server: http.Server): void {
  net.Server.prototype.close.call(server);
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
