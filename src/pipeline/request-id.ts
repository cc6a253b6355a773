/**
 * The request id stage: keep a sane client-sent X-Request-Id, otherwise make one; echo it back. An id
 * that holds something shaped like a key is not sane: it would be echoed, logged and sent to the worker.
 */
import { randomUUID } from 'node:crypto';
import type { RequestHandler } from 'express';
import { holdsKey } from '../common/key-shape';
import { contextOf } from '../context';

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestIdOf(sent: string | string[] | undefined): string {
  return typeof sent === 'string' && SANE_REQUEST_ID.test(sent) && !holdsKey(sent) ? sent : randomUUID();
}

export const assignRequestId: RequestHandler = function assignRequestId(req, res, next) {
  const requestId = requestIdOf(req.headers['x-request-id']);
  contextOf(res).requestId = requestId;
  res.setHeader('X-Request-Id', requestId);
  next();
};
