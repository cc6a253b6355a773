/**
 * The read + validate stage: read the body once, bounded, decode strict UTF-8, parse JSON and
 * validate it. Bounds are checked as the bytes arrive: the size (413, decided from Content-Length
 * before reading when the client declares it), and the nesting and number of JSON values (400,
 * json-bounds.ts), so a hostile body is refused after its first bytes and never held whole. Error
 * messages never quote the body: a client may have pasted a key into it.
 */
import type { IncomingMessage } from 'node:http';
import type { RequestHandler } from 'express';
import { contextOf } from '../context';
import { errors, GatewayError } from '../errors';
import { decodeUtf8Strict } from '../common/text';
import type { Endpoint } from '../common/endpoints';
import { JsonBoundsScanner } from './json-bounds';
import { MAX_END_USER_LENGTH, validateModelRequest } from './validate';

export interface BodyLimits {
  maxBytes: number;
  /** Nesting of arrays and objects, and values (elements and members), allowed before JSON.parse runs. */
  maxJsonDepth: number;
  maxJsonElements: number;
}

/** The stage for one endpoint: its body is validated for what that endpoint requires. */
export function readAndValidateBody(limits: BodyLimits, endpoint: Endpoint = 'chat'): RequestHandler {
  return async function readBody(req, res, next) {
    const encoding = req.headers['content-encoding'];
    if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') throw errors.unsupportedContentEncoding();

    const raw = await readBounded(req, limits);
    const text = decodeUtf8Strict(raw);
    if (text === undefined) throw errors.invalidJson('it is not valid UTF-8');
    const request = validateModelRequest(endpoint, parseJson(text));
    if (request instanceof GatewayError) throw request;
    const header = req.headers['x-chatgate-end-user'];
    if (typeof header === 'string' && header !== '') {
      // Node gives header bytes as latin1: read as UTF-8, an id names the same end user here as in the body.
      const endUser = decodeUtf8Strict(Buffer.from(header, 'latin1'));
      if (endUser === undefined || endUser.length > MAX_END_USER_LENGTH) throw errors.invalidHeader('X-Chatgate-End-User', `'X-Chatgate-End-User' must be UTF-8 of at most ${MAX_END_USER_LENGTH} characters.`);
      request.endUser = endUser; // the application's own word on its user, over the body's
    }

    const context = contextOf(res);
    context.body = text;
    context.modelRequest = request;
    next();
  };
}

const UNREADABLE = 'The request body could not be read completely (its length did not match Content-Length, or the client stopped sending).';

/**
 * The whole body, or a refusal as soon as one is certain. Past the size limit the rest is left unread
 * (paused): the error handler answers with Connection: close. Past a JSON bound, the rest of a body of
 * a declared length within the limit is let through to nowhere (thrown away as it comes, never held,
 * never parsed): the error handler sends the answer at once and ends it once the upload is over (an
 * answer ended while the request is unfinished makes Node close the connection, and a client still
 * uploading then meets a reset and may lose the answer).
 */
function readBounded(req: IncomingMessage, { maxBytes, maxJsonDepth, maxJsonElements }: BodyLimits): Promise<Buffer> {
  const header = req.headers['content-length'];
  const declared = header === undefined ? undefined : Number(header);
  if (declared !== undefined && declared > maxBytes) return Promise.reject(errors.requestTooLarge(maxBytes));
  if (req.destroyed || req.readableEnded) return Promise.reject(errors.badRequest(UNREADABLE));
  const scanner = new JsonBoundsScanner(maxJsonDepth, maxJsonElements);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    const stop = (refusal: GatewayError, discardRest: boolean) => {
      done(refusal);
      if (discardRest) req.resume();
      else req.pause();
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > maxBytes) return stop(errors.requestTooLarge(maxBytes), false);
      const passed = scanner.feed(chunk);
      const bounded = declared !== undefined; // and within maxBytes: checked before reading
      if (passed === 'depth') return stop(errors.invalidBody(null, `The request body nests arrays and objects more than ${maxJsonDepth} levels deep.`), bounded);
      if (passed === 'values') return stop(errors.invalidBody(null, `The request body holds more than ${maxJsonElements} values (array elements and object members).`), bounded);
      chunks.push(chunk);
    };
    const onEnd = () => done(declared !== undefined && received !== declared ? errors.badRequest(UNREADABLE) : undefined);
    const onBroken = () => done(errors.badRequest(UNREADABLE));
    const done = (refusal: GatewayError | undefined) => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('aborted', onBroken);
      req.off('close', onBroken);
      req.off('error', onBroken);
      if (refusal) reject(refusal);
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received));
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('aborted', onBroken);
    req.on('close', onBroken);
    req.on('error', onBroken);
  });
}

function parseJson(text: string): unknown {
  if (text.trim() === '') throw errors.invalidJson('the body is empty');
  try {
    return JSON.parse(text);
  } catch (err) {
    const position = /position (\d+)/.exec(String((err as Error).message))?.[1];
    throw errors.invalidJson(position ? `syntax error at position ${position}` : 'syntax error');
  }
}
