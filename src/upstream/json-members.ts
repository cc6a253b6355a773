/**
 * Pure edits of a JSON object text's top-level members, leaving every other byte as the client sent
 * it (number spellings, key order, white space, large integers). The input has already been parsed
 * successfully, so the scan only has to find token boundaries.
 */

/** Replace the value of every top-level member `name` (JSON.parse keeps the last of duplicates) or, when there is none, add it. */
export function setTopLevelMember(json: string, name: string, valueJson: string): string {
  const spans = topLevelValueSpans(json, name);
  if (spans.length === 0) return appendMember(json, name, valueJson);
  let out = '';
  let from = 0;
  for (const [start, end] of spans) {
    out += json.slice(from, start) + valueJson;
    from = end;
  }
  return out + json.slice(from);
}

/** The worker's model name in place of `<provider>/<model_name>` (only a string value is replaced). */
export function rewriteModel(json: string, model: string): string {
  return topLevelValueSpans(json, 'model').some(([start]) => json[start] === '"') ? setTopLevelMember(json, 'model', JSON.stringify(model)) : json;
}

function appendMember(json: string, name: string, valueJson: string): string {
  const close = json.lastIndexOf('}');
  const at = json.slice(0, close).trimEnd().length;
  const separator = json[at - 1] === '{' ? '' : ',';
  return `${json.slice(0, at)}${separator}${JSON.stringify(name)}:${valueJson}${json.slice(at)}`;
}

/** [start, end) of each value of a top-level member named `name` (duplicates included). */
function topLevelValueSpans(json: string, name: string): Array<[number, number]> {
  const spans: Array<[number, number]> = [];
  let i = skipSpace(json, 0);
  if (json[i] !== '{') return spans;
  i = skipSpace(json, i + 1);
  while (i < json.length && json[i] !== '}') {
    const keyEnd = skipString(json, i);
    const key = JSON.parse(json.slice(i, keyEnd)) as string;
    const valueStart = skipSpace(json, skipSpace(json, keyEnd) + 1); // past the ':'
    const valueEnd = skipValue(json, valueStart);
    if (key === name) spans.push([valueStart, valueEnd]);
    i = skipSpace(json, valueEnd);
    if (json[i] === ',') i = skipSpace(json, i + 1);
  }
  return spans;
}

function skipSpace(json: string, i: number): number {
  while (i < json.length && (json[i] === ' ' || json[i] === '\n' || json[i] === '\r' || json[i] === '\t')) i++;
  return i;
}

/** `i` is at an opening quote; returns the index after the closing one. */
function skipString(json: string, i: number): number {
  let from = i + 1;
  for (;;) {
    const quote = json.indexOf('"', from);
    let backslashes = 0;
    while (json.charCodeAt(quote - 1 - backslashes) === 92) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    from = quote + 1;
  }
}

function skipValue(json: string, i: number): number {
  const first = json[i];
  if (first === '"') return skipString(json, i);
  if (first === '{' || first === '[') {
    let depth = 0;
    while (i < json.length) {
      const c = json[i];
      if (c === '"') {
        i = skipString(json, i);
        continue;
      }
      if (c === '{' || c === '[') depth++;
      else if (c === '}' || c === ']') {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    return i;
  }
  while (i < json.length && !',}] \n\r\t'.includes(json[i]!)) i++;
  return i;
}
