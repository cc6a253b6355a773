/**
 * The console API's key routes (api.ts adds them after the session routes): the current account's
 * keys listed, made, edited, revoked and rotated. A key of another account is answered 404, as one
 * that does not exist (accounts.key); only the answers to create and rotate carry the key itself.
 * A key's own limits stay within the platform's, and its quota and budget within its account's.
 */
import type { Request, Response, Router } from 'express';
import { publicView } from '../auth/issue';
import { KEY_FIELDS, keyFields, noFields, objectBody, onlyFields, rotationGrace, withinPlatformLimits, type KeyFields, type LimitDefaults } from '../auth/key-fields';
import { allowed, isPlatformAdmin } from '../accounts/roles';
import type { Accounts } from '../accounts/service';
import type { SignedIn } from '../accounts/sessions';
import { errors } from '../errors';
import { actorOf, client, may } from './api-access';

export function keyRoutes(api: Router, accounts: Accounts, platformLimits: () => LimitDefaults): void {
  const store = accounts.store;

  api.get('/keys', async (_req, res) => {
    const { accountId } = may(res, 'keys.read');
    res.json({ object: 'list', data: (await store.list(accountId)).map(publicView) });
  });

  api.post('/keys', async (req, res) => {
    const { accountId, signedIn } = may(res, 'keys.create');
    const fields = keyFields(onlyFields(objectBody(req.body), KEY_FIELDS), true);
    withinPlatform(signedIn, fields, platformLimits);
    await withinAccountQuota(accounts, accountId, fields);
    const { key, record } = await accounts.createKey(accountId, fields, actorOf(signedIn), client(req));
    res.status(201).json({ ...publicView(record), key });
  });

  api.patch('/keys/:id', async (req, res) => {
    const { record, signedIn } = await mayManageKey(accounts, req, res);
    const fields = keyFields(onlyFields(objectBody(req.body), KEY_FIELDS), false);
    withinPlatform(signedIn, fields, platformLimits);
    await withinAccountQuota(accounts, record.accountId, fields);
    res.json(publicView(await accounts.editKey(record, fields, actorOf(signedIn), client(req))));
  });

  api.post('/keys/:id/revoke', async (req, res) => {
    noFields(req.body);
    const { record, signedIn } = await mayManageKey(accounts, req, res);
    res.json(publicView(await accounts.revokeKey(record, actorOf(signedIn), client(req))));
  });

  api.post('/keys/:id/rotate', async (req, res) => {
    const graceSeconds = rotationGrace(req.body);
    const { record, signedIn } = await mayManageKey(accounts, req, res);
    const rotated = await accounts.rotateKey(record, actorOf(signedIn), client(req), graceSeconds);
    res.json({ ...publicView(rotated.record), key: rotated.key });
  });
}

/** A key of the current account that this person may edit, rotate or revoke. */
async function mayManageKey(accounts: Accounts, req: Request, res: Response) {
  const { signedIn, accountId } = may(res, 'keys.read');
  const record = await accounts.key(String(req.params.id), accountId);
  if (!allowed(actorOf(signedIn), signedIn.role, 'key.manage', record.createdBy)) throw errors.permissionDenied('change a key someone else created');
  return { record, signedIn };
}

/** A key's own limits, set by someone who is not a platform admin, stay within the platform's. */
function withinPlatform(signedIn: SignedIn, fields: KeyFields, platformLimits: () => LimitDefaults) {
  if (!isPlatformAdmin(actorOf(signedIn))) withinPlatformLimits(fields.rateLimit, platformLimits());
}

/** A key's own quota and budget stay within its account's. */
async function withinAccountQuota(accounts: Accounts, accountId: string, fields: KeyFields) {
  if (!fields.quota && !fields.budget) return;
  const account = await accounts.account(accountId);
  const caps = [
    ['quota', fields.quota ?? {}, account.quota],
    ['budget', fields.budget ?? {}, account.budget],
  ] as const;
  for (const [field, own, ofAccount] of caps) {
    for (const [period, cap] of Object.entries(ofAccount) as Array<[keyof typeof own, number | null]>) {
      const value = own[period];
      if (cap !== null && (value === null || (value !== undefined && value > cap))) throw errors.invalidBody(`${field}.${period}`, `'${field}.${period}' must be at most the account's, ${cap}.`);
    }
  }
}
