// The exact source text of each element of a JSON array, for a request whose items must
// each be kept as sent (a batch completion's results, docs/tasks.md §6), as a top-level
// field's text is (json.ts `raw`). The text must already have passed parseStrictJson.

/** Each element's text, without surrounding whitespace; undefined when `text` is no array. */
export function arrayElementTexts(text: string): string[] | undefined {
  const body = text.trim();
  if (!body.startsWith("[")) return undefined;
  const elements: string[] = [];
  let depth = 0;
  let start = 1;
  for (let i = 1; i < body.length; i++) {
    const c = body.charCodeAt(i);
    if (c === 0x22) {
      // A string: skip to its closing quote, over escapes.
      for (i++; body.charCodeAt(i) !== 0x22; i++) if (body.charCodeAt(i) === 0x5c) i++;
    } else if (c === 0x5b || c === 0x7b) {
      depth++;
    } else if (c === 0x5d || c === 0x7d) {
      if (depth === 0) {
        const last = body.slice(start, i).trim();
        if (last !== "" || elements.length > 0) elements.push(last);
        return elements;
      }
      depth--;
    } else if (c === 0x2c && depth === 0) {
      elements.push(body.slice(start, i).trim());
      start = i + 1;
    }
  }
  throw new RangeError("not a JSON array that parseStrictJson accepted");
}
