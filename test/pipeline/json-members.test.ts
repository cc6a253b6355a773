import { rewriteModel, setTopLevelMember } from '../../src/pipeline/json-members';

describe('rewriteModel', () => {
  test('replaces only the top-level model value; every other byte stays', () => {
    const input =
      '{"seed": 12345678901234567890, "model":"mock/echo", "temperature": 0.70, "x": {"model": "inner"},' +
      ' "messages":[{"role":"user","content":"a \\"model\\": \\"x\\" b"}]}';
    expect(rewriteModel(input, 'echo')).toBe(
      '{"seed": 12345678901234567890, "model":"echo", "temperature": 0.70, "x": {"model": "inner"},' +
        ' "messages":[{"role":"user","content":"a \\"model\\": \\"x\\" b"}]}',
    );
  });

  test('the model key anywhere among the members, first, middle or last', () => {
    expect(rewriteModel('{"model":"p/m","a":1}', 'm')).toBe('{"model":"m","a":1}');
    expect(rewriteModel('{"a":[1,{"b":"}"}],"model":"p/m","c":"]"}', 'm')).toBe('{"a":[1,{"b":"}"}],"model":"m","c":"]"}');
    expect(rewriteModel('{"a":-1.5e+3,"b":true,"c":null,"model":"p/m"}', 'm')).toBe('{"a":-1.5e+3,"b":true,"c":null,"model":"m"}');
  });

  test('white space and new lines around the colon and the braces', () => {
    expect(rewriteModel('{\n  "model"\n :\t "p/m" ,\n "n": 1e2\n}', 'm')).toBe('{\n  "model"\n :\t "m" ,\n "n": 1e2\n}');
    expect(rewriteModel('\r\n {\r\n"model" : "p/m"\r\n}\r\n', 'm')).toBe('\r\n {\r\n"model" : "m"\r\n}\r\n');
  });

  test('an escaped key name is still the model key', () => {
    expect(rewriteModel('{"mod\\u0065l":"p/m","messages":[]}', 'm')).toBe('{"mod\\u0065l":"m","messages":[]}');
    expect(rewriteModel('{"\\u006d\\u006F\\u0064\\u0065\\u006c":"p/m"}', 'm')).toBe('{"\\u006d\\u006F\\u0064\\u0065\\u006c":"m"}');
  });

  test('keys that only look like model are left alone', () => {
    const input = '{"model ":"a/b","Model":"c/d","a\\"model":"e/f","models":["g/h"],"model":"p/m","x":"model"}';
    expect(rewriteModel(input, 'm')).toBe(input.replace('"p/m"', '"m"'));
  });

  test('duplicate top-level model keys are all replaced (JSON.parse keeps the last)', () => {
    expect(rewriteModel('{"model":"a/b","model":"p/m"}', 'm')).toBe('{"model":"m","model":"m"}');
    expect(rewriteModel('{"model":"a/b", "x": {"model":"c/d"}, "model" : "p/m"}', 'm')).toBe('{"model":"m", "x": {"model":"c/d"}, "model" : "m"}');
  });

  test('strings ending in escaped backslashes do not confuse the scan', () => {
    const input = '{"a":"x\\\\","model":"p/m","b":"\\\\\\"model\\":1","c":"\\\\\\\\"}';
    expect(rewriteModel(input, 'm')).toBe(input.replace('"p/m"', '"m"'));
    const valueEndsInBackslash = '{"model":"p/m\\\\"}';
    expect(rewriteModel(valueEndsInBackslash, 'm')).toBe('{"model":"m"}');
  });

  test('a model name that needs escaping is written as valid JSON', () => {
    expect(rewriteModel('{"model":"p/x"}', 'we"ird\\')).toBe('{"model":"we\\"ird\\\\"}');
    expect(rewriteModel('{"model":"p/x"}', 'ünï/𝄞')).toBe('{"model":"ünï/𝄞"}');
    expect(rewriteModel('{"model":"p/x"}', 'tab\there\nnl')).toBe('{"model":"tab\\there\\nnl"}');
    const out = rewriteModel('{"model":"p/x"}', 'we"ird/ünï\u2028\u0000');
    expect(JSON.parse(out).model).toBe('we"ird/ünï\u2028\u0000');
  });

  test('a body without a string model, or not an object, is left alone (validation refuses it earlier)', () => {
    for (const input of ['{"model":7}', '{"model":null}', '{"model":["p/m"]}', '{"x":{"model":"p/m"}}', '{}', '[{"model":"p/m"}]', '"model"']) {
      expect(rewriteModel(input, 'm')).toBe(input);
    }
  });

  const bodies: Array<Record<string, unknown>> = [
    { model: 'p/m', messages: [{ role: 'user', content: 'hi' }] },
    { messages: [{ role: 'user', content: [{ type: 'text', text: '{"model":"no"}' }] }], model: 'p/a/b', stream: true },
    { model: 'p/m', nested: { deep: [[[{ model: 'inner' }]]] }, empty: {}, list: [], nothing: null, yes: true },
    { a: '\\', model: 'p/m', b: '\\"', c: 'ü€𝄞' },
    { model: 'p/m', tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { model: { type: 'string' } } } } }] },
    { 'mod el': 1, model: 'p/m', 'model\u0000': 2, '': 'empty key' },
    { model: 'p/m', n: [0, -0.5, 1e-7, 1.5e300, -12], s: '}]},{"model":"x"' },
    { stop: ['\n', '"', '\\'], model: 'p/m', logit_bias: { '50256': -100 } },
    { model: 'p/m', content: '\u2028\u2029\u0007\t\r\n' },
    { model: 'p/m', '"': '"', '\\': '\\', '{': '}' },
    { messages: [], temperature: 0, model: 'p/m' },
    { model: 'vllm/meta-llama/Llama-3.1-8B', max_tokens: 10, seed: 42, user: 'model' },
  ];
  test.each(bodies)('parses to the input with only model changed: %j', (body) => {
    for (const text of [JSON.stringify(body), JSON.stringify(body, null, 2), JSON.stringify(body, null, '\t')]) {
      const out = rewriteModel(text, 'renamed');
      expect(JSON.parse(out)).toEqual({ ...body, model: 'renamed' });
      expect(out.length).toBe(text.length - JSON.stringify(body.model).length + '"renamed"'.length);
    }
  });
});

describe('setTopLevelMember', () => {
  test('adds a member that is absent, keeping the rest byte for byte', () => {
    expect(setTopLevelMember('{"a": 1.50 }', 'stream_options', '{"include_usage":true}')).toBe('{"a": 1.50,"stream_options":{"include_usage":true} }');
    expect(setTopLevelMember('{ }', 'x', 'true')).toBe('{"x":true }');
  });

  test('replaces a member of any type, nested members untouched', () => {
    const input = '{"stream_options": {"include_usage": false, "x": [1]}, "n": {"stream_options": 1}}';
    const out = setTopLevelMember(input, 'stream_options', '{"include_usage":true,"x":[1]}');
    expect(out).toBe('{"stream_options": {"include_usage":true,"x":[1]}, "n": {"stream_options": 1}}');
  });
});
