#!/usr/bin/env node
// A webhook receiver for Alertmanager that only logs: one line per alert it is sent, on stdout.
// docker-compose.yml runs it as the alert-log service (`docker compose logs -f alert-log`); swap the
// receiver in deploy/alertmanager/alertmanager.yml for a real one to be woken up by a page.
//   node deploy/alertmanager/webhook-logger.js     (PORT, default 8080; HOST, default 0.0.0.0)
// GET /healthz answers 200 for the container's health check. Node's standard library only.
'use strict';
const http = require('node:http');

const MAX_BODY_BYTES = 1024 * 1024;
const port = Number(process.env.PORT || 8080);
const host = process.env.HOST || '0.0.0.0';

function describe(payload) {
  if (!payload || !Array.isArray(payload.alerts)) return [`unrecognised notification: ${JSON.stringify(payload).slice(0, 2000)}`];
  return payload.alerts.map((alert) => {
    const labels = alert.labels || {};
    const annotations = alert.annotations || {};
    const { alertname = '(no alertname)', ...rest } = labels;
    const shown = Object.entries(rest).map(([name, value]) => `${name}=${value}`).join(' ');
    const status = String(alert.status || payload.status || 'unknown').toUpperCase();
    const since = status === 'RESOLVED' ? `ended ${alert.endsAt}` : `since ${alert.startsAt}`;
    return `${status} ${alertname} ${shown} (${since}): ${annotations.summary || ''}${annotations.description ? ` | ${annotations.description}` : ''}`;
  });
}

const server = http.createServer((req, res) => {
  if (req.method === 'GET' && (req.url === '/healthz' || req.url === '/')) {
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
    return;
  }
  if (req.method !== 'POST') {
    res.writeHead(405, { allow: 'GET, POST' }).end();
    return;
  }
  const chunks = [];
  let size = 0;
  req.on('data', (chunk) => {
    size += chunk.length;
    if (size <= MAX_BODY_BYTES) chunks.push(chunk);
  });
  req.on('end', () => {
    if (size > MAX_BODY_BYTES) {
      console.log(`${new Date().toISOString()} refused a notification of ${size} bytes (more than ${MAX_BODY_BYTES})`);
      res.writeHead(413).end();
      return;
    }
    const text = Buffer.concat(chunks).toString('utf8');
    let lines;
    try {
      lines = describe(JSON.parse(text));
    } catch {
      lines = [`not JSON: ${text.slice(0, 2000)}`];
    }
    for (const line of lines) console.log(`${new Date().toISOString()} ${line}`);
    res.writeHead(200, { 'content-type': 'text/plain' }).end('logged\n');
  });
});

server.listen(port, host, () => console.log(`${new Date().toISOString()} alert log listening on ${host}:${server.address().port}`));
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
