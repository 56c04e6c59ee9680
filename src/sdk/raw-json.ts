// Raw JSON text inside a request body: a task's input or a worker's result that must
// reach Orbit exactly as written (12345678901234567890 survives; a JS number would not).
export class RawJson {
  constructor(readonly text: string) {
    JSON.parse(text); // refuse what is not JSON before it is sent
  }
}

/** JSON.stringify, with every RawJson spliced in verbatim. */
export function stringifyBody(body: unknown): string {
  const raws: string[] = [];
  const text = JSON.stringify(body, (_key, value: unknown) => {
    if (value instanceof RawJson) {
      raws.push(value.text);
      return `\u0000raw:${raws.length - 1}\u0000`;
    }
    return value;
  });
  return text.replace(/"\\u0000raw:([0-9]+)\\u0000"/g, (_m, i: string) => raws[Number(i)]!);
}
