/**
 * The prompt estimate: one token per 4 bytes for prose, and no less than the text's tokens for a
 * prompt written to tokenize densely (what a hostile client would send to reserve less than it
 * uses). The dense counts below are what BPE tokenizers (cl100k, o200k, Llama 3) give at least.
 */
import { estimatePromptTokens } from '../../src/common/estimate';

const body = (content: string, extra: Record<string, unknown> = {}) => JSON.stringify({ model: 'vllm/llama', messages: [{ role: 'user', content }], ...extra });

test('prose: about one token per 4 bytes of the body, as before (at most a quarter more)', () => {
  const prose = 'The quick brown fox jumps over the lazy dog while the cat sleeps in the warm afternoon sun. '.repeat(20);
  const bytes = Math.ceil(Buffer.byteLength(body(prose)) / 4);
  expect(estimatePromptTokens(body(prose))).toBeGreaterThanOrEqual(bytes);
  expect(estimatePromptTokens(body(prose))).toBeLessThanOrEqual(bytes * 1.25);
  expect(estimatePromptTokens(body('Hello there'))).toBe(Math.ceil(Buffer.byteLength(body('Hello there')) / 4));
  expect(estimatePromptTokens('')).toBe(0);
  expect(estimatePromptTokens(Buffer.from('x'))).toBe(1);
});

test('what is outside strings (braces, numbers, bounds) counts only by its bytes', () => {
  const small = body('hi');
  const big = body('hi', { max_tokens: 123_456_789, temperature: 0.123456789, n: 1 });
  expect(estimatePromptTokens(big)).toBe(Math.ceil(Buffer.byteLength(big) / 4));
  expect(estimatePromptTokens(big) - estimatePromptTokens(small)).toBeLessThanOrEqual(Math.ceil((big.length - small.length) / 4));
});

test.each([
  ['one-letter words', 'a '.repeat(1000), 1000],
  ['random letters', 'qzxvkjwpfhgbnmtrdlcs'.repeat(50), 400],
  ['punctuation', '!?'.repeat(500), 1000],
  ['digits in ones', '1 2 3 4 5 6 7 8 9 '.repeat(100), 900],
  ['emoji', '🙂'.repeat(300), 600],
  ['CJK, raw UTF-8', '漢字仮名交じり文'.repeat(50), 600],
  ['CJK, escaped as \\uXXXX', '漢字仮名交じり文'.repeat(50), 600],
])('a dense prompt (%s) is estimated at no less than its tokens', (_name, content, tokens) => {
  const json = _name.includes('escaped') ? body(content).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`) : body(content);
  expect(JSON.parse(json).messages[0].content).toBe(content);
  // The 4-byte rule alone fell short of these (the hole this closes).
  if (!_name.includes('escaped')) expect(Math.ceil(Buffer.byteLength(json) / 4)).toBeLessThan(tokens);
  expect(estimatePromptTokens(json)).toBeGreaterThanOrEqual(tokens);
});

test('a look-alike quote does not end a string early, and an escaped one does not either', () => {
  const tricky = body('say \\"a a a a a a a a\\" then ＂a a a a a a a a a a a a＂');
  const parsed = JSON.parse(tricky).messages[0].content as string;
  expect(parsed).toContain('"a a a a');
  const words = parsed.split(/\s+/).length;
  expect(estimatePromptTokens(tricky)).toBeGreaterThanOrEqual(words);
});
