/** Pure: an answer's cost from the price table, in whole nano-units. */
import { amountOf, Prices } from '../../src/accounts/prices';

const prices = new Prices({
  currency: 'EUR',
  models: {
    'vllm/meta-llama/*': { inputPerMillion: 0.2, outputPerMillion: 0.6, cachedInputPerMillion: 0.05 },
    'vllm/*': { inputPerMillion: 1, outputPerMillion: 3 },
    'tgi/mistral-?b': { inputPerMillion: 0.1, outputPerMillion: 0.1 },
  },
});

test('the first glob that names the model sets its price; a model without one costs 0', () => {
  expect(prices.priceOf('vllm/meta-llama/Llama-3.1-8B')).toMatchObject({ inputPerMillion: 0.2 });
  expect(prices.priceOf('vllm/qwen')).toMatchObject({ inputPerMillion: 1 });
  expect(prices.priceOf('tgi/mistral-7b')).toMatchObject({ inputPerMillion: 0.1 });
  expect(prices.priceOf('tgi/mistral-70b')).toBeUndefined(); // ? is one character
  expect(prices.priceOf('VLLM/qwen')).toBeUndefined(); // globs are exact about case, as key globs are
  expect(prices.costNanos('ollama/llama3', { promptTokens: 1000, completionTokens: 1000 })).toBe(0);
});

test('cost = input x its price + output x its price, per million, in nano-units; cached input at its own price', () => {
  // 1,000 in at 1/M and 500 out at 3/M: 0.001 + 0.0015 = 0.0025 EUR.
  expect(prices.costNanos('vllm/qwen', { promptTokens: 1000, completionTokens: 500 })).toBe(2_500_000);
  expect(amountOf(2_500_000)).toBe(0.0025);
  // 1,000 in, 600 of them cached: 400 x 0.2 + 600 x 0.05 + 100 x 0.6 = 80 + 30 + 60 = 170 micro-EUR.
  expect(prices.costNanos('vllm/meta-llama/x', { promptTokens: 1000, completionTokens: 100, cachedTokens: 600 })).toBe(170_000);
  // Cached tokens with no cached price count as input; more cached than prompt counts no more than the prompt.
  expect(prices.costNanos('vllm/qwen', { promptTokens: 10, completionTokens: 0, cachedTokens: 10 })).toBe(10_000);
  expect(prices.costNanos('vllm/meta-llama/x', { promptTokens: 10, completionTokens: 0, cachedTokens: 99 })).toBe(500);
});

test('one answer costs at most a million units of the currency, a whole number of nano-units', () => {
  const dear = new Prices({ currency: 'USD', models: { '*': { inputPerMillion: 1_000_000, outputPerMillion: 1_000_000 } } });
  expect(dear.costNanos('a/b', { promptTokens: 1e12, completionTokens: 1e12 })).toBe(1e15);
  expect(Number.isSafeInteger(dear.costNanos('a/b', { promptTokens: 1e12 - 1, completionTokens: 7 }))).toBe(true);
});

test('a million answers of a fraction of a nano-unit each still add up: each is rounded, whole numbers sum exactly', () => {
  const cheap = new Prices({ currency: 'USD', models: { '*': { inputPerMillion: 0.0007, outputPerMillion: 0 } } });
  expect(cheap.costNanos('a/b', { promptTokens: 3, completionTokens: 0 })).toBe(2); // 2.1 nano-units
  let total = 0;
  for (let i = 0; i < 1_000_000; i++) total += cheap.costNanos('a/b', { promptTokens: 1000, completionTokens: 0 });
  expect(total).toBe(700_000_000); // 0.7 USD, exactly
});
