/**
 * Pure edits of a JSON object text's top-level members, leaving every other byte as the client sent
 * it (number spellings, key order, white space, large integers). The input has already been parsed
 * successfully, so the scan only has to find token boundaries.
 */

/** Replace the value of every top-level member `name` (JSON.parse keeps the last of duplicates) or, when there is none, add it. */
export function setTopLevelMember(json: string, name: string, valueJson: string): string {
  const spans = topLevelValueSpans(json, name);
  return spans.length === 0 ? appendMember(json, name, valueJson) : replaceSpans(json, spans, valueJson);
}

/** The worker's model name in place of `<provider>/<model_name>` (only a string value is replaced). */
export function rewriteModel(json: string, model: string): string {
  const spans = topLevelValueSpans(json, 'model');
  return spans.some(([start]) => json.charCodeAt(start) === QUOTE) ? replaceSpans(json, spans, JSON.stringify(model)) : json;
}

function replaceSpans(json: string, spans: Array<[number, number]>, valueJson: string): string {
  let out = '';
  let from = 0;
  for (const [start, end] of spans) {
    out += json.slice(from, start) + valueJson;
    from = end;
  }
  return out + json.slice(from);
}

function appendMember(json: string, name: string, valueJson: string): string {
  const close = json.lastIndexOf('}');
  const at = json.slice(0, close).trimEnd().length;
  const separator = json[at - 1] === '{' ? '' : ',';
  return `${json.slice(0, at)}${separator}${JSON.stringify(name)}:${valueJson}${json.slice(at)}`;
}

// Character codes: the scan compares numbers (charCodeAt), not one-character strings.
const QUOTE = 34;
const BACKSLASH = 92;
const COMMA = 44;
const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;
const OPEN_BRACKET = 91;
const CLOSE_BRACKET = 93;

/** [start, end) of each value of a top-level member named `name` (duplicates included). */
function topLevelValueSpans(json: string, name: string): Array<[number, number]> {
  const spans: Array<[number, number]> = [];
  let i = skipSpace(json, 0);
  if (json.charCodeAt(i) !== OPEN_BRACE) return spans;
  i = skipSpace(json, i + 1);
  while (i < json.length && json.charCodeAt(i) !== CLOSE_BRACE) {
    const keyEnd = skipString(json, i);
    const valueStart = skipSpace(json, skipSpace(json, keyEnd) + 1); // past the ':'
    const valueEnd = skipValue(json, valueStart);
    if (keyIs(json, i, keyEnd, name)) spans.push([valueStart, valueEnd]);
    i = skipSpace(json, valueEnd);
    if (json.charCodeAt(i) === COMMA) i = skipSpace(json, i + 1);
  }
  return spans;
}

/** Whether the key string json[start, end) (quotes included) names `name`; only an escaped key is decoded. */
function keyIs(json: string, start: number, end: number, name: string): boolean {
  for (let i = start + 1; i < end - 1; i++) if (json.charCodeAt(i) === BACKSLASH) return JSON.parse(json.slice(start, end)) === name;
  return end - start - 2 === name.length && json.startsWith(name, start + 1);
}

/** JSON's white space: space, line feed, carriage return, tab. */
const isSpace = (c: number) => c === 32 || c === 10 || c === 13 || c === 9;

function skipSpace(json: string, i: number): number {
  while (isSpace(json.charCodeAt(i))) i++;
  return i;
}

/** `i` is at an opening quote; returns the index after the closing one. */
function skipString(json: string, i: number): number {
  let from = i + 1;
  for (;;) {
    const quote = json.indexOf('"', from);
    let backslashes = 0;
    while (json.charCodeAt(quote - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    from = quote + 1;
  }
}

function skipValue(json: string, i: number): number {
  const first = json.charCodeAt(i);
  if (first === QUOTE) return skipString(json, i);
  if (first === OPEN_BRACE || first === OPEN_BRACKET) {
    let depth = 0;
    while (i < json.length) {
      const c = json.charCodeAt(i);
      if (c === QUOTE) {
        i = skipString(json, i);
        continue;
      }
      if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++;
      else if ((c === CLOSE_BRACE || c === CLOSE_BRACKET) && --depth === 0) return i + 1;
      i++;
    }
    return i;
  }
  // A number, true, false or null: up to the next separator or white space.
  for (let c = json.charCodeAt(i); i < json.length && c !== COMMA && c !== CLOSE_BRACE && c !== CLOSE_BRACKET && !isSpace(c); c = json.charCodeAt(++i));
  return i;
}
