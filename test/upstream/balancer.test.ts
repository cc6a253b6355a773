import { pickLeastLoaded, type Candidate } from '../../src/upstream/balancer';

const worker = (name: string, outstanding = 0, weight = 1) => ({ name, outstanding, weight, currentWeight: 0 }) satisfies Candidate & { name: string };
const picks = <T extends Candidate & { name: string }>(pool: T[], n: number) => Array.from({ length: n }, () => pickLeastLoaded(pool)!.name);

test('the least loaded worker wins', () => {
  expect(pickLeastLoaded([worker('a', 3), worker('b', 1), worker('c', 2)])?.name).toBe('b');
  expect(pickLeastLoaded([worker('a', 0), worker('b', 1)])?.name).toBe('a');
});

test('equally loaded workers take turns in order (round robin)', () => {
  expect(picks([worker('a'), worker('b'), worker('c')], 7)).toEqual(['a', 'b', 'c', 'a', 'b', 'c', 'a']);
});

test('a single worker is always picked', () => {
  expect(picks([worker('only', 5)], 3)).toEqual(['only', 'only', 'only']);
});

test('only the least loaded take turns; a busy worker sits out', () => {
  const pool = [worker('a'), worker('busy', 4), worker('c')];
  expect(picks(pool, 4)).toEqual(['a', 'c', 'a', 'c']);
});

test('weights share idle traffic in proportion (smooth weighted round robin)', () => {
  const pool = [worker('heavy', 0, 3), worker('light', 0, 1)];
  const chosen = picks(pool, 8);
  expect(chosen.filter((n) => n === 'heavy')).toHaveLength(6);
  expect(chosen.slice(0, 4).filter((n) => n === 'light')).toHaveLength(1); // spread, not bunched
  expect(chosen).toEqual(['heavy', 'heavy', 'light', 'heavy', 'heavy', 'heavy', 'light', 'heavy']);
});

test('load is compared per unit of weight', () => {
  expect(pickLeastLoaded([worker('a', 2, 4), worker('b', 1, 1)])?.name).toBe('a');
  expect(pickLeastLoaded([worker('a', 3, 2), worker('b', 1, 1)])?.name).toBe('b');
});

test('no candidates, no pick', () => {
  expect(pickLeastLoaded([])).toBeUndefined();
});
