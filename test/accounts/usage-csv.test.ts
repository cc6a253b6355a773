/** The usage CSV names each row's key: a key by its name, a workload identity by its subject, any other id by nothing. */
import { usageCsv } from '../../src/accounts/usage';

const day = (keyId: string) => ({ date: '2026-11-29', accountId: 'acc_1', keyId, requests: 2, refused: 1, costNanos: 1_500_000_000, promptTokens: 10, completionTokens: 5 });

test('a key is named by its name, a workload by its subject, a deleted key by nothing; cells that start a formula are quoted', () => {
  const csv = usageCsv([day('key_a'), day('workload:0a1b2c3d:system:serviceaccount:ci:runner'), day('key_gone'), day('workload:0a1b2c3d:=cmd|x')], new Map([['key_a', 'deploy bot']]));
  const rows = csv.trimEnd().split('\r\n');
  expect(rows[0]).toBe('date,keyId,keyName,requests,promptTokens,completionTokens,refused,cost');
  expect(rows[1]).toBe('2026-11-29,key_a,deploy bot,2,10,5,1,1.5');
  expect(rows[2]).toBe('2026-11-29,workload:0a1b2c3d:system:serviceaccount:ci:runner,system:serviceaccount:ci:runner,2,10,5,1,1.5');
  expect(rows[3]).toBe('2026-11-29,key_gone,,2,10,5,1,1.5');
  expect(rows[4]!.split(',')[2]).not.toMatch(/^=/);
});
