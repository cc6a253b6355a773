/**
 * docs/openapi.yaml describes the admin API and the console's API as they answer: a scenario calls
 * every operation (but the OIDC ones, which need an identity provider: test/console/oidc.test.ts),
 * and every real answer is matched to its documented operation and status, and its body validated
 * against the documented schema (JSON Schema 2020-12, which OpenAPI 3.1 uses). An answer the document
 * does not describe, a body that does not fit, or an operation never called fails the test. The
 * requests too: a body the server took must fit the operation's request schema, every request schema
 * refuses fields it does not list, and so does the server (400 naming the field).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import Ajv2020 from 'ajv/dist/2020';
import YAML from 'yaml';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { eventually } from '../helpers/time';

const DOCUMENT = YAML.parse(readFileSync(path.join(__dirname, '..', '..', 'docs', 'openapi.yaml'), 'utf8')) as {
  openapi: string;
  paths: Record<string, Record<string, { requestBody?: { content: Record<string, { schema: unknown }> }; responses: Record<string, { $ref?: string; content?: Record<string, { schema: unknown }> }> }>>;
  components: { responses: Record<string, { content: Record<string, { schema: unknown }> }> };
};
const METHODS = ['get', 'post', 'put', 'patch', 'delete'];
const NOT_HERE = new Set(['GET /console/api/oidc/login', 'GET /console/api/oidc/callback']);

const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true });
ajv.addFormat('date-time', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/);
ajv.addFormat('date', /^\d{4}-\d{2}-\d{2}$/);
ajv.addFormat('email', /^[^\s@]+@[^\s@]+$/);
/** The document's local refs, pointed at the copy of its schemas that ajv holds. */
const resolveRefs = (schema: unknown): unknown =>
  JSON.parse(JSON.stringify(schema), (field, value) =>
    field === '$ref' && typeof value === 'string' && value.startsWith('#/components/schemas/') ? `openapi#/$defs/${value.slice('#/components/schemas/'.length)}` : value,
  );
ajv.addSchema({ $id: 'openapi', $defs: resolveRefs((DOCUMENT.components as unknown as { schemas: unknown }).schemas) }, 'openapi');

const operations = Object.entries(DOCUMENT.paths).flatMap(([template, item]) =>
  METHODS.filter((method) => item[method]).map((method) => ({
    name: `${method.toUpperCase()} ${template}`,
    method: method.toUpperCase(),
    pattern: new RegExp(`^${template.replace(/\./g, '\\.').replace(/\{[^}]+\}/g, '[^/]+')}$`),
    responses: item[method]!.responses,
    requestSchema: item[method]!.requestBody?.content['application/json']?.schema,
  })),
);
/** A request schema as ajv sees it: a $ref to the components followed. */
const requestSchemaOf = (schema: unknown): Record<string, unknown> => {
  const ref = (schema as { $ref?: string }).$ref;
  const components = (DOCUMENT.components as unknown as { schemas: Record<string, unknown> }).schemas;
  return (ref ? components[ref.split('/').pop()!] : schema) as Record<string, unknown>;
};
const called = new Map<string, Set<string>>();
const problems: string[] = [];

function operationOf(method: string, url: string) {
  const pathOnly = url.split('?')[0]!;
  return operations.find((candidate) => candidate.method === method && candidate.pattern.test(pathOnly));
}

function check(method: string, url: string, response: RawResponse, body?: unknown): RawResponse {
  const pathOnly = url.split('?')[0]!;
  const operation = operationOf(method, url);
  if (!operation) {
    problems.push(`${method} ${pathOnly}: not in the document`);
    return response;
  }
  const status = String(response.status);
  if (body !== undefined && response.status < 300) {
    // A body the server took is one the document allows.
    if (!operation.requestSchema) problems.push(`${operation.name}: took a body, and the document describes none`);
    else {
      const validate = ajv.compile(resolveRefs(operation.requestSchema) as object);
      if (!validate(body)) problems.push(`${operation.name}: took a body the document refuses: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(body).slice(0, 200)}`);
    }
  }
  called.set(operation.name, (called.get(operation.name) ?? new Set()).add(status));
  let documented = operation.responses[status];
  if (!documented) {
    problems.push(`${operation.name}: ${status} is not documented (${response.body.slice(0, 120)})`);
    return response;
  }
  if (documented.$ref) documented = DOCUMENT.components.responses[documented.$ref.split('/').pop()!]!;
  if (!documented.content) {
    if (response.body !== '') problems.push(`${operation.name} ${status}: documented without a body, answered one`);
    return response;
  }
  const type = String(response.headers['content-type'] ?? '').split(';')[0]!;
  const content = documented.content[type];
  if (!content) {
    problems.push(`${operation.name} ${status}: content type ${type} is not documented`);
    return response;
  }
  if (type === 'application/json') {
    const validate = ajv.compile(resolveRefs(content.schema) as object);
    if (!validate(JSON.parse(response.body))) problems.push(`${operation.name} ${status}: ${ajv.errorsText(validate.errors)} in ${response.body.slice(0, 300)}`);
  }
  return response;
}

const TOKEN = 'admin-token-for-the-openapi-test';
const PASSWORD = 'an openapi test password';
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, auth: { createFirstKey: false, lastUsedFlushMs: 100 } });

const admin = async (method: string, apiPath: string, body?: unknown, token = TOKEN) =>
  check(method, `/admin/api${apiPath}`, await request(f.gw.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) }), body);
const consoleCall = async (cookie: string | undefined, method: string, apiPath: string, body?: unknown) =>
  check(
    method,
    `/console/api${apiPath}`,
    await request(f.gw.url, {
      ca: f.gw.ca,
      method,
      path: `/console/api${apiPath}`,
      headers: { origin: `https://${new URL(f.gw.url).host}`, 'content-type': 'application/json', ...(cookie ? { cookie } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
    body,
  );

test('the document is OpenAPI 3.1 and every schema in it compiles', () => {
  expect(DOCUMENT.openapi).toBe('3.1.0');
  // A comma in a YAML flow mapping's text makes a key of the rest: no key of the document has a space.
  const spaced: string[] = [];
  JSON.stringify(DOCUMENT, (_field, value: unknown) => {
    if (value && typeof value === 'object' && !Array.isArray(value)) spaced.push(...Object.keys(value).filter((name) => name.includes(' ')));
    return value;
  });
  expect(spaced).toEqual([]);
  for (const operation of operations) {
    for (const response of Object.values(operation.responses)) {
      for (const content of Object.values(response.content ?? {})) expect(() => ajv.compile(resolveRefs(content.schema) as object)).not.toThrow();
    }
    if (operation.requestSchema) expect(() => ajv.compile(resolveRefs(operation.requestSchema) as object)).not.toThrow();
  }
});

test('every request body schema says additionalProperties: false, and refuses a field it does not list', () => {
  const open = operations.filter((operation) => operation.requestSchema && requestSchemaOf(operation.requestSchema).additionalProperties !== false).map((operation) => operation.name);
  expect(open).toEqual([]);
  for (const operation of operations.filter((candidate) => candidate.requestSchema)) {
    const validate = ajv.compile(resolveRefs(operation.requestSchema) as object);
    expect({ operation: operation.name, valid: validate({ modles: ['a/*'] }) }).toEqual({ operation: operation.name, valid: false });
  }
});

test('every answer of the admin API and the console API fits the document, and every operation is called', async () => {
  // The admin API.
  const account = (await admin('POST', '/accounts', { name: 'documented', quota: { tokensPerDay: 100000 } })).json<{ id: string }>().id;
  await admin('POST', '/accounts', { name: 'documented' }); // 409
  await admin('GET', '/accounts');
  await admin('GET', `/accounts/${account}`);
  await admin('GET', '/accounts/acc_nope'); // 404
  await admin('PATCH', `/accounts/${account}`, { quota: { tokensPerMonth: 5000000 } });
  await admin('POST', `/accounts/${account}/members`, { email: 'owner@example.com', role: 'owner', password: PASSWORD });
  await admin('POST', `/accounts/${account}/members`, { email: 'second@example.com', role: 'member' });
  await admin('POST', `/accounts/${account}/members`, { email: 'not an email', role: 'member' }); // 400
  await admin('GET', `/accounts/${account}/members`);
  await admin('POST', `/accounts/${account}/members/second@example.com/password-link`);
  await admin('PATCH', `/accounts/${account}/members/second@example.com`, { role: 'member' });
  await admin('PATCH', `/accounts/${account}/members/owner@example.com`, { role: 'member' }); // 409: the last owner
  await admin('PATCH', `/accounts/${account}/members/nobody@example.com`, { role: 'owner' }); // 404
  await admin('PATCH', `/accounts/${account}/members/second@example.com`, { role: 'admin' }); // 400
  await admin('PATCH', '/people/second@example.com', { admin: false });
  await admin('PATCH', '/people/second@example.com', { passwordWithOidc: true });
  await admin('PATCH', '/people/second@example.com', { admin: false, passwordWithOidc: false, root: true }); // 400
  await admin('PATCH', '/people/nobody@example.com', { admin: true }); // 404
  const created = (await admin('POST', '/keys', { name: 'documented key', account })).json<{ id: string; key: string }>();
  await admin('POST', '/keys', { name: 'x', account: 'acc_nope' }); // 404
  await admin('GET', '/keys');
  await admin('GET', `/keys/${created.id}`);
  await admin('PATCH', `/keys/${created.id}`, { name: 'renamed', quota: { tokensPerDay: 1000 } });
  await admin('POST', `/keys/${created.id}/rotate`);
  await admin('POST', `/keys/${created.id}/rotate`, { why: 'no reason' }); // 400: takes no body
  await admin('POST', `/keys/${created.id}/revoke`, { reason: 'none taken' }); // 400
  await admin('POST', `/accounts/${account}/members/second@example.com/password-link`, { ttl: 1 }); // 400
  await admin('GET', '/keys', undefined, 'a-wrong-admin-token-guess'); // 401
  const secondsKey = (await admin('POST', '/keys', { name: 'second key', account })).json<{ id: string }>().id;
  await admin('DELETE', `/accounts/${account}/members/second@example.com?transferKeysTo=second@example.com`); // 400: not an owner
  await admin('DELETE', `/accounts/${account}/members/second@example.com?transferKeysTo=owner@example.com`);
  expect(secondsKey).toMatch(/^key_/);
  await admin('DELETE', `/accounts/${account}/members/owner@example.com`); // 409: the last owner

  // The console API.
  await consoleCall(undefined, 'GET', '/config');
  await consoleCall(undefined, 'POST', '/session', { email: 'owner@example.com', password: 'not the right one' }); // 401
  await consoleCall(undefined, 'GET', '/keys'); // 401
  const signedIn = await consoleCall(undefined, 'POST', '/session', { email: 'owner@example.com', password: PASSWORD });
  const cookie = String(signedIn.headers['set-cookie']).split(';')[0]!;
  await consoleCall(cookie, 'GET', '/session');
  await consoleCall(cookie, 'PUT', '/session/account', { account });
  const key = (await consoleCall(cookie, 'POST', '/keys', { name: 'console key', quota: { tokensPerDay: 500 } })).json<{ id: string; key: string }>();
  await consoleCall(cookie, 'GET', '/keys');
  await consoleCall(cookie, 'PATCH', `/keys/${key.id}`, { models: ['mock/*'] });
  await consoleCall(cookie, 'POST', `/keys/${key.id}/rotate`);
  await consoleCall(cookie, 'POST', `/keys/${key.id}/rotate`, { now: true }); // 400
  await consoleCall(cookie, 'POST', `/keys/${key.id}/revoke`, { now: true }); // 400
  const invited = (await consoleCall(cookie, 'POST', '/members', { email: 'invitee@example.com', role: 'member' })).json<{ passwordLink: string }>();
  await consoleCall(undefined, 'POST', '/password/check', { token: invited.passwordLink.split('#set-password=')[1] });
  await consoleCall(undefined, 'POST', '/password', { token: invited.passwordLink.split('#set-password=')[1], password: 'the invitee password' });
  await consoleCall(undefined, 'POST', '/password/check', { token: 'spent-or-never-made' }); // 400
  await consoleCall(undefined, 'POST', '/password', { token: 'spent-or-never-made', password: 'the invitee password' }); // 400
  await consoleCall(cookie, 'GET', '/members');
  await consoleCall(cookie, 'PATCH', '/members/invitee@example.com', { role: 'owner' });
  await consoleCall(cookie, 'PATCH', '/members/invitee@example.com', { role: 'member' });
  await consoleCall(cookie, 'PATCH', '/members/nobody@example.com', { role: 'member' }); // 404
  await consoleCall(cookie, 'PATCH', '/members/invitee@example.com', { role: 'member', since: 'now' }); // 400
  await consoleCall(cookie, 'PATCH', '/account', { keyPolicy: { maxLifetimeDays: 365 } });
  await consoleCall(cookie, 'PATCH', '/account', { keyPolicy: { maxLifetimeDays: 0 } }); // 400
  await consoleCall(cookie, 'PATCH', '/account', { keyPolicy: null });
  await consoleCall(cookie, 'DELETE', '/members/invitee@example.com?transferKeysTo=second@example.com'); // 400: only oneself
  await consoleCall(cookie, 'DELETE', '/members/invitee@example.com?transferKeysTo=owner@example.com');
  const usable = (await admin('POST', '/keys', { name: 'used', account })).json<{ key: string }>().key;
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(usable), body: chatBody() })).status).toBe(200);
  await eventually(async () => ((await consoleCall(cookie, 'GET', '/usage')).json<{ data: unknown[] }>().data.length > 0 ? true : undefined));
  await consoleCall(cookie, 'GET', '/usage?from=not-a-date'); // 400
  await consoleCall(cookie, 'GET', '/usage.csv');
  await consoleCall(cookie, 'GET', '/usage/breakdown?by=endUser&endUser=alice');
  await consoleCall(cookie, 'GET', '/usage/breakdown?by=people'); // 400
  await admin('GET', `/accounts/${account}/usage/breakdown?by=model&limit=5`);
  await admin('GET', `/accounts/${account}/usage/breakdown?by=endUser&limit=5000`); // 400
  await consoleCall(cookie, 'GET', '/usage/breakdown.csv?by=model');
  await consoleCall(cookie, 'GET', '/audit');
  await admin('GET', `/accounts/${account}/usage`);
  await admin('GET', `/accounts/${account}/audit`);
  // An alert: a key past half its daily quota.
  const alerted = (await admin('POST', '/keys', { name: 'alerted', account, quota: { tokensPerDay: 120 } })).json<{ key: string }>().key;
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(alerted), 'x-mock-tokens': '60' }, body: chatBody({ max_tokens: 60 }) })).status).toBe(200);
  await eventually(async () => ((await admin('GET', `/accounts/${account}/alerts`)).json<{ data: unknown[] }>().data.length > 0 ? true : undefined));
  await consoleCall(cookie, 'GET', '/alerts');
  await consoleCall(cookie, 'POST', `/keys/${key.id}/revoke`);
  await admin('POST', `/keys/${created.id}/revoke`);
  // Every operation that takes a body refuses a field it does not know, naming it, as the document says.
  const refusedUnknown: string[] = [];
  for (const operation of operations.filter((candidate) => candidate.requestSchema)) {
    const url = operation.name
      .split(' ')[1]!
      .replace('/keys/{id}', `/keys/${key.id}`)
      .replace('/accounts/{id}', `/accounts/${account}`)
      .replace('{email}', 'owner@example.com');
    const body = { modles: ['a/*'] };
    const answer = url.startsWith('/admin/api') ? await admin(operation.method, url.slice('/admin/api'.length), body) : await consoleCall(cookie, operation.method, url.slice('/console/api'.length), body);
    if (answer.status === 400 && answer.json().error.code === 'invalid_body' && answer.json().error.param === 'modles') refusedUnknown.push(operation.name);
    else problems.push(`${operation.name}: an unknown field got ${answer.status} ${answer.body.slice(0, 200)}`);
  }
  expect(refusedUnknown.length).toBeGreaterThanOrEqual(16);

  await consoleCall(cookie, 'PUT', '/password', { currentPassword: 'not the right one', password: 'a new openapi password' }); // 400
  await consoleCall(cookie, 'PUT', '/password', { currentPassword: PASSWORD, password: 'a new openapi password' });
  await consoleCall(cookie, 'DELETE', '/session');
  await consoleCall(cookie, 'GET', '/session'); // 401: ended
  const again = await consoleCall(undefined, 'POST', '/session', { email: 'owner@example.com', password: 'a new openapi password' });
  await consoleCall(String(again.headers['set-cookie']).split(';')[0]!, 'DELETE', '/sessions');

  expect(problems).toEqual([]);
  const uncalled = operations.map((operation) => operation.name).filter((name) => !called.has(name) && !NOT_HERE.has(name));
  expect(uncalled).toEqual([]);
});
