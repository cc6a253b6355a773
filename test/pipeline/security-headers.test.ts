import express from 'express';
import helmet from 'helmet';
import request from 'supertest';
import { API_SECURITY_HEADERS, securityHeaders } from '../../src/pipeline/security-headers';

function answerWith(middleware: express.RequestHandler) {
  const app = express();
  app.use((_req, res, next) => {
    res.setHeader('X-Powered-By', 'something'); // helmet removes it; the precomputed set must too
    next();
  });
  app.use(middleware);
  app.get('/', (_req, res) => {
    res.send('ok');
  });
  return request(app).get('/').expect(200);
}

const securityHeaderSet = (headers: Record<string, string>) => {
  const { date: _date, 'content-length': _length, etag: _etag, ...rest } = headers;
  return rest;
};

test("the precomputed headers are exactly helmet's, with its defaults", async () => {
  const fromHelmet = await answerWith(helmet());
  const precomputed = await answerWith(securityHeaders());
  expect(securityHeaderSet(precomputed.headers)).toEqual(securityHeaderSet(fromHelmet.headers));
  expect(precomputed.headers['x-powered-by']).toBeUndefined();
  expect(precomputed.headers['strict-transport-security']).toMatch(/max-age=\d+/);
});

test("and with options: helmet's choices are kept", async () => {
  const options = { strictTransportSecurity: { maxAge: 60 }, frameguard: false } as const;
  const precomputed = await answerWith(securityHeaders(options));
  expect(securityHeaderSet(precomputed.headers)).toEqual(securityHeaderSet((await answerWith(helmet(options))).headers));
  expect(precomputed.headers['strict-transport-security']).toMatch(/^max-age=60;/);
  expect(precomputed.headers['x-frame-options']).toBeUndefined();
});

test("the public listener's API set is helmet's own with those options", async () => {
  const precomputed = await answerWith(securityHeaders(API_SECURITY_HEADERS));
  expect(securityHeaderSet(precomputed.headers)).toEqual(securityHeaderSet((await answerWith(helmet(API_SECURITY_HEADERS))).headers));
  expect(precomputed.headers['content-security-policy']).toBe("default-src 'none';frame-ancestors 'none'");
});
