import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { SlotSet, type SlotMember } from '../../src/tuning/slot-set';

interface Item extends SlotMember {
  name: string;
}
const item = (name: string): Item => ({ name, slot: -1 });
const namesOf = (set: SlotSet<Item>) => {
  const names: string[] = [];
  set.forEach((member) => {
    names.push(member.name);
  });
  return names.sort();
};

describe('SlotSet', () => {
  it('holds each member once, and deleting a member that is not in it changes nothing', () => {
    const set = new SlotSet<Item>();
    const [a, b] = [item('a'), item('b')];
    set.add(a);
    set.add(a);
    set.add(b);
    expect(set.size).toBe(2);
    set.delete(item('stranger'));
    expect(namesOf(set)).toEqual(['a', 'b']);
    set.delete(a);
    set.delete(a);
    expect(namesOf(set)).toEqual(['b']);
    expect(a.slot).toBe(-1);
  });

  it('keeps every other member reachable when one is deleted from the middle', () => {
    const set = new SlotSet<Item>();
    const members = ['a', 'b', 'c', 'd', 'e'].map(item);
    for (const member of members) set.add(member);
    set.delete(members[1]!);
    set.delete(members[0]!);
    expect(namesOf(set)).toEqual(['c', 'd', 'e']);
    for (const member of [members[2]!, members[3]!, members[4]!]) set.delete(member);
    expect(set.size).toBe(0);
    for (const member of members) expect(member.slot).toBe(-1);
  });

  it('visits each member once while the visit deletes it, deletes others and adds new ones', () => {
    const set = new SlotSet<Item>();
    const members = ['a', 'b', 'c', 'd', 'e', 'f'].map(item);
    for (const member of members) set.add(member);
    const visited: string[] = [];
    set.forEach((member) => {
      visited.push(member.name);
      set.delete(member);
      if (member.name === 'b') set.delete(members[5]!); // not yet visited: must not be
      set.add(item(`${member.name}2`));
    });
    expect(visited.sort()).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(namesOf(set)).toEqual(['a2', 'b2', 'c2', 'd2', 'e2']);
  });

  it('lets deleted members die young once the set is in the old generation (a Set does not)', () => {
    // V8 leaves a rehashed Set table pointing to its successor; from the old generation that chain
    // keeps every later entry alive through minor collections, so they are promoted. Each kind runs in
    // a process of its own: V8 would otherwise allocate the second run's members straight in the old
    // generation, having seen the first run's survive (pretenuring).
    const script = (kind: string) => `
      const v8 = require('node:v8');
      const { SlotSet } = require(${JSON.stringify(path.join(__dirname, '..', '..', 'dist', 'tuning', 'slot-set.js'))});
      const oldSpace = () => v8.getHeapSpaceStatistics().find((space) => space.space_name === 'old_space').space_used_size;
      function promotedKiB(set) {
        const live = [];
        for (let i = 0; i < 64; i++) { const member = { slot: -1, payload: new Array(100).fill(i) }; set.add(member); live.push(member); }
        gc(); gc(); // the set and what it holds are now old
        const before = oldSpace();
        for (let round = 0; round < 20000; round++) {
          const member = { slot: -1, payload: new Array(100).fill(round) };
          set.add(member);
          set.delete(live[round % 64]);
          live[round % 64] = member;
          if (round % 500 === 0) gc({ type: 'minor' });
        }
        return (oldSpace() - before) / 1024;
      }
      process.stdout.write(String(promotedKiB(new ${kind}())));
    `;
    const promotedKiB = (kind: string) => {
      const run = spawnSync(process.execPath, ['--expose-gc', '-e', script(kind)], { encoding: 'utf8' });
      expect(run.stderr).toBe('');
      return Number(run.stdout);
    };
    expect(promotedKiB('Set')).toBeGreaterThan(2048); // the effect is there to be avoided (about 8 MiB here)
    expect(promotedKiB('SlotSet')).toBeLessThan(256); // about 10 KiB
  });
});
