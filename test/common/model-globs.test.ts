import { globMatches, modelAllowed } from '../../src/common/model-globs';

describe('modelAllowed', () => {
  test.each(['anything/at-all', 'mock/echo', '', 'no-slash'])('an empty list allows %p', (model) => {
    expect(modelAllowed([], model)).toBe(true);
  });

  test('a provider glob covers every model of it, slashes included, and nothing else', () => {
    expect(modelAllowed(['mock/*'], 'mock/echo')).toBe(true);
    expect(modelAllowed(['mock/*'], 'mock/a/b')).toBe(true);
    expect(modelAllowed(['mock/*'], 'mock/')).toBe(true);
    expect(modelAllowed(['mock/*'], 'mockx/echo')).toBe(false);
    expect(modelAllowed(['mock/*'], 'other/mock')).toBe(false);
    expect(modelAllowed(['mock/*'], 'other/mock/echo')).toBe(false);
    expect(modelAllowed(['mock/*'], 'mock')).toBe(false);
  });

  test('an exact name allows that model only (case matters)', () => {
    expect(modelAllowed(['mock/echo'], 'mock/echo')).toBe(true);
    expect(modelAllowed(['mock/echo'], 'mock/echo2')).toBe(false);
    expect(modelAllowed(['mock/echo'], 'mock/ech')).toBe(false);
    expect(modelAllowed(['mock/echo'], 'Mock/echo')).toBe(false);
  });

  test('several globs: any may match', () => {
    const globs = ['mock/echo', 'vllm/meta-llama/*', 'tgi/qwen-?b'];
    expect(modelAllowed(globs, 'mock/echo')).toBe(true);
    expect(modelAllowed(globs, 'vllm/meta-llama/Llama-3.1-8B')).toBe(true);
    expect(modelAllowed(globs, 'tgi/qwen-7b')).toBe(true);
    expect(modelAllowed(globs, 'tgi/qwen-72b')).toBe(false);
    expect(modelAllowed(globs, 'vllm/qwen')).toBe(false);
    expect(modelAllowed(globs, 'mock/other')).toBe(false);
  });
});

describe('globMatches', () => {
  test.each([
    ['mock/echo', 'mock/echo', true],
    ['mock/echo', 'mock/echo2', false],
    ['mock/ech?', 'mock/echo', true],
    ['mock/ech?', 'mock/ech', false],
    ['mock/ech?', 'mock/echoo', false],
    ['?', 'a', true],
    ['?', '', false],
    ['?', 'ab', false],
    ['??', 'ab', true],
    ['?', '/', true],
    ['*', '', true],
    ['*', 'x/y', true],
    ['**', 'abc', true],
    ['', '', true],
    ['', 'a', false],
    ['a*', 'a', true],
    ['*a', 'ba', true],
    ['*a', 'ab', false],
    ['a*b*c', 'a-b-c', true],
    ['a*b*c', 'abc', true],
    ['a*b*c', 'a-c-b', false],
    ['*/llama-*', 'vllm/llama-3', true],
    ['*?', '', false],
    ['?*', 'x', true],
    ['a.b', 'axb', false], // no regular-expression meaning
    ['a+', 'aa', false],
    ['[ab]', 'a', false],
    ['[ab]', '[ab]', true],
  ])('%p ~ %p is %p', (glob, text, expected) => {
    expect(globMatches(glob, text)).toBe(expected);
  });

  test.each([
    ['*a*a*a*b', 'a'.repeat(20_000)],
    ['*a*a*a*a*a*a*b', 'a'.repeat(5_000)],
    ['a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b', 'a'.repeat(2_000)],
    ['*?*?*?*?*?*?*b', 'a'.repeat(2_000)],
  ])('the pathological %s against a long string of a answers false', (glob, text) => {
    expect(globMatches(glob, text)).toBe(false);
    expect(globMatches(glob, `${text}b`)).toBe(true);
  });
});
