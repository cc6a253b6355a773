/**
 * The read + validate stage: read the body once, bounded (413 past the limit, decided from
 * Content-Length before reading when the client declares it), decode strict UTF-8, parse JSON and
 * validate it. Error messages never quote the body: a client may have pasted a key into it.
 */
import type { RequestHandler } from 'express';
import getRawBody from 'raw-body';
import { contextOf } from '../context';
import { errors, GatewayError } from '../errors';
import { decodeUtf8Strict } from '../common/text';
import { validateChatRequest } from './validate';

export function readAndValidateBody({ maxBytes }: { maxBytes: number }): RequestHandler {
  return async function readBody(req, res, next) {
    const encoding = req.headers['content-encoding'];
    if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') throw errors.unsupportedContentEncoding();

    const raw = await readRaw(req, maxBytes);
    const text = decodeUtf8Strict(raw);
    if (text === undefined) throw errors.invalidJson('it is not valid UTF-8');
    const chat = validateChatRequest(parseJson(text));
    if (chat instanceof GatewayError) throw chat;

    const context = contextOf(res);
    context.body = text;
    context.chat = chat;
    next();
  };
}

async function readRaw(req: Parameters<RequestHandler>[0], maxBytes: number): Promise<Buffer> {
  try {
    return await getRawBody(req, { limit: maxBytes, length: req.headers['content-length'] });
  } catch (err) {
    if ((err as { type?: string }).type === 'entity.too.large') throw errors.requestTooLarge(maxBytes);
    throw errors.badRequest('The request body could not be read completely (its length did not match Content-Length, or the client stopped sending).');
  }
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
