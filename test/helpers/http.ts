/** Clients for tests: raw HTTPS requests that trust the gateway's dev certificate, and the official openai client. */
import https from 'node:https';
import tls from 'node:tls';
import http from 'node:http';
import OpenAI from 'openai';
import { Agent, fetch as undiciFetch } from 'undici';

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  json<T = { error: { message: string; type: string; param: string | null; code: string } }>(): T;
}

export interface RawRequest {
  method?: string;
  path?: string;
  headers?: http.OutgoingHttpHeaders;
  body?: string | Buffer;
  ca?: string;
  /** The client's own address (127.0.0.2, say: any of 127/8 reaches a loopback listener), as a second client would have. */
  localAddress?: string;
}

export function request(base: string, { method = 'POST', path = '/v1/chat/completions', headers = {}, body, ca, localAddress }: RawRequest = {}): Promise<RawResponse> {
  const url = new URL(path, base);
  const transport = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = transport.request(url, { method, headers, ca, agent: false, localAddress }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, json: () => JSON.parse(text) });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

export function chatBody(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: 'mock/echo', messages: [{ role: 'user', content: 'Hello there' }], ...extra });
}

export function bearer(key: string): { authorization: string } {
  return { authorization: `Bearer ${key}` };
}

export function basic(key: string): { authorization: string } {
  return { authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}` };
}

/** The official openai client, trusting the gateway's certificate. */
export function openaiClient(baseUrl: string, apiKey: string, ca: string): OpenAI {
  const dispatcher = new Agent({ connect: { ca } });
  return new OpenAI({
    baseURL: `${baseUrl}/v1`,
    apiKey,
    maxRetries: 0,
    fetch: ((input: unknown, init?: Record<string, unknown>) => undiciFetch(input as string, { ...init, dispatcher } as never)) as never,
  });
}

/** Send raw bytes over TLS and collect what comes back until the server closes (or a bound passes). */
export async function rawExchange(target: { url: string; ca: string }, payload: string): Promise<{ head: string; closed: boolean }> {
  const port = Number(new URL(target.url).port);
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ port, host: '127.0.0.1', ca: target.ca, servername: 'localhost' }, () => socket.write(payload));
    let text = '';
    const bound = setTimeout(() => {
      socket.destroy();
      resolve({ head: text, closed: false });
    }, 5000);
    socket.on('data', (chunk) => (text += chunk.toString('utf8')));
    socket.on('close', () => {
      clearTimeout(bound);
      resolve({ head: text, closed: true });
    });
    socket.on('error', reject);
  });
}
