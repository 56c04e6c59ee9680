// The canonical text of a JSON document, for "same content" comparisons (idempotency,
// docs/protocol.md §2): object keys sorted by code unit, no insignificant whitespace, strings
// re-escaped the one way JSON.stringify does, and numbers kept exactly as written, so
// that 12345678901234567890 and 12345678901234567891 stay different (a double cannot
// tell them apart). The input must already have passed parseStrictJson.

export function canonicalJson(text: string): string {
  const c = new Canonicalizer(text);
  const out = c.value();
  return out;
}

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);

class Canonicalizer {
  private pos = 0;
  constructor(private readonly text: string) {}

  private ws(): void {
    while (WS.has(this.text.charCodeAt(this.pos))) this.pos++;
  }

  value(): string {
    this.ws();
    const ch = this.text[this.pos];
    let out: string;
    if (ch === "{") out = this.object();
    else if (ch === "[") out = this.array();
    else if (ch === '"') out = JSON.stringify(this.string());
    else out = this.scalar();
    this.ws();
    return out;
  }

  private object(): string {
    this.pos++; // {
    const members: [string, string][] = [];
    this.ws();
    if (this.text[this.pos] === "}") {
      this.pos++;
      return "{}";
    }
    for (;;) {
      this.ws();
      const key = this.string();
      this.ws();
      this.pos++; // :
      members.push([key, this.value()]);
      if (this.text[this.pos++] === "}") break; // else ","
    }
    members.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${members.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`;
  }

  private array(): string {
    this.pos++; // [
    this.ws();
    if (this.text[this.pos] === "]") {
      this.pos++;
      return "[]";
    }
    const items: string[] = [];
    for (;;) {
      items.push(this.value());
      if (this.text[this.pos++] === "]") break; // else ","
    }
    return `[${items.join(",")}]`;
  }

  /** Reads a string token and returns its value (the token is valid JSON). */
  private string(): string {
    const start = this.pos;
    this.pos++; // opening quote
    for (;;) {
      const ch = this.text.charCodeAt(this.pos++);
      if (ch === 0x5c)
        this.pos++; // skip the escaped character
      else if (ch === 0x22) break;
    }
    return JSON.parse(this.text.slice(start, this.pos)) as string;
  }

  /** Numbers, true, false, null: their exact text. */
  private scalar(): string {
    const start = this.pos;
    while (this.pos < this.text.length && !/[\s,\]}]/.test(this.text[this.pos]!)) this.pos++;
    return this.text.slice(start, this.pos);
  }
}
