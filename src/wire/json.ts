/**
 * Strict JSON (RFC 8259) for every request body and WebSocket frame.
 *
 * JSON.parse is too lenient for the contract: it keeps the last of duplicate keys,
 * accepts lone surrogate escapes and turns 1e400 into Infinity, and it loses the exact
 * text of numbers like 12345678901234567890. So this is a hand-written
 * recursive-descent parser over the string with an index. On top of the grammar it
 * rejects: duplicate keys at any depth (compared after unescaping, so "a" and "\u0061"
 * collide), lone surrogates (escaped or raw), non-finite numbers, fractions that read as
 * whole numbers (1e-400, 100.000000000000001), a BOM, and nesting
 * deeper than `maxDepth` (default 256; never above HARD_MAX_DEPTH, so deep input cannot
 * exhaust the JS stack).
 *
 * It is slower than JSON.parse, mostly from building objects from non-internalised key
 * strings, which JSON.parse does natively; the duplicate-key check itself is cheap.
 */
import { WireError, quote } from "./wire-error.js";

export interface StrictJsonResult {
  readonly value: unknown;
  /** For a top-level object: each key → the exact source text of its value. Else empty. */
  readonly raw: ReadonlyMap<string, string>;
}

export interface StrictJsonOptions {
  /** Deepest allowed nesting of arrays/objects; `[]` is depth 1. Default 256. */
  readonly maxDepth?: number;
}

export const DEFAULT_MAX_DEPTH = 256;
/**
 * Each level costs 2 JS frames (value → container); 1024 levels stay far
 * below V8's default stack (~10k frames), so no option can make the parser overflow.
 */
export const HARD_MAX_DEPTH = 1024;

export function parseStrictJson(text: string, opts?: StrictJsonOptions): StrictJsonResult {
  const maxDepth = opts?.maxDepth ?? DEFAULT_MAX_DEPTH;
  if (!Number.isInteger(maxDepth) || maxDepth < 0 || maxDepth > HARD_MAX_DEPTH) {
    // A programming error, not bad client input.
    throw new RangeError(`maxDepth must be an integer in 0..${HARD_MAX_DEPTH}`);
  }
  return new Parser(text, maxDepth).parseDocument();
}

const enum C {
  Tab = 0x09,
  Lf = 0x0a,
  Cr = 0x0d,
  Space = 0x20,
  Quote = 0x22,
  Plus = 0x2b,
  Comma = 0x2c,
  Minus = 0x2d,
  Dot = 0x2e,
  Zero = 0x30,
  Nine = 0x39,
  Colon = 0x3a,
  E = 0x45,
  LBracket = 0x5b,
  Backslash = 0x5c,
  RBracket = 0x5d,
  e = 0x65,
  LBrace = 0x7b,
  RBrace = 0x7d,
  Bom = 0xfeff,
}

/** Values of single-character escapes, indexed by the character after the backslash. */
const SIMPLE_ESCAPES: Readonly<Record<string, string>> = {
  '"': '"',
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
};

/**
 * Whether a JSON number's text denotes a whole number: no non-zero digit of its mantissa
 * lies after the point once the exponent has moved it (1.5e1 is, 0.5 and 1e-400 are not).
 */
function wholeNumberText(t: string): boolean {
  const m = /^-?([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/.exec(t);
  if (!m) throw new RangeError("not a JSON number");
  const digits = m[1]! + (m[2] ?? "");
  const point = m[1]!.length + Number(m[3] ?? "0"); // ±Infinity for an absurd exponent: still ordered
  for (let k = digits.length - 1; k >= 0; k--) if (digits.charCodeAt(k) !== C.Zero) return k < point;
  return true;
}

class Parser {
  private pos = 0;

  constructor(
    private readonly text: string,
    private readonly maxDepth: number,
  ) {}

  parseDocument(): StrictJsonResult {
    const { text } = this;
    if (text.charCodeAt(0) === C.Bom) this.fail("byte order mark");
    this.skipWs();
    const raw = new Map<string, string>();
    const value = text.charCodeAt(this.pos) === C.LBrace ? this.parseObject(0, raw) : this.parseValue(0);
    this.skipWs();
    if (this.pos < text.length) this.unexpected();
    return { value, raw };
  }

  private parseValue(depth: number): unknown {
    const c = this.text.charCodeAt(this.pos);
    switch (c) {
      case C.Quote:
        return this.parseString();
      case C.LBrace:
        return this.parseObject(depth, null);
      case C.LBracket:
        return this.parseArray(depth);
      case 0x74:
        return this.literal("true", true);
      case 0x66:
        return this.literal("false", false);
      case 0x6e:
        return this.literal("null", null);
      default:
        if (c === C.Minus || (c >= C.Zero && c <= C.Nine)) return this.parseNumber();
        return this.unexpected();
    }
  }

  /** `raw` is non-null only for the top-level object. */
  private parseObject(depth: number, raw: Map<string, string> | null): Record<string, unknown> {
    const { text } = this;
    const obj: Record<string, unknown> = {};
    if (this.open(depth, C.RBrace)) return obj;
    for (;;) {
      if (text.charCodeAt(this.pos) !== C.Quote) this.unexpected("expected string key");
      const keyAt = this.pos;
      const key = this.parseString();
      // hasOwn, not `in`: "toString" is a fine key; "__proto__" is own (set below).
      if (Object.hasOwn(obj, key)) this.fail(`duplicate key ${quote(key)}`, keyAt);
      this.skipWs();
      if (text.charCodeAt(this.pos) !== C.Colon) this.unexpected("expected ':'");
      this.pos++;
      this.skipWs();
      const valueAt = this.pos;
      const value = this.parseValue(depth + 1);
      if (raw !== null) raw.set(key, text.slice(valueAt, this.pos));
      if (key === "__proto__") {
        // Plain assignment would call the inherited __proto__ setter and swap the
        // prototype; define an own data property instead, exactly like JSON.parse.
        // Other keys can use fast assignment: Object.prototype has no other setters.
        Object.defineProperty(obj, key, { value, writable: true, enumerable: true, configurable: true });
      } else {
        obj[key] = value;
      }
      if (!this.more(C.RBrace, "expected ',' or '}'")) return obj;
    }
  }

  private parseArray(depth: number): unknown[] {
    const arr: unknown[] = [];
    if (this.open(depth, C.RBracket)) return arr;
    for (;;) {
      arr.push(this.parseValue(depth + 1));
      if (!this.more(C.RBracket, "expected ',' or ']'")) return arr;
    }
  }

  /** After a member: true past a ',', false past the closer, else a syntax error. */
  private more(closer: number, expected: string): boolean {
    this.skipWs();
    const c = this.text.charCodeAt(this.pos);
    if (c !== C.Comma && c !== closer) this.unexpected(expected);
    this.pos++;
    this.skipWs();
    return c === C.Comma;
  }

  /** At an opener inside `depth` containers: checks depth, steps in; true if empty. */
  private open(depth: number, closer: number): boolean {
    if (depth >= this.maxDepth) this.fail(`nesting deeper than ${this.maxDepth}`);
    this.pos++;
    this.skipWs();
    if (this.text.charCodeAt(this.pos) !== closer) return false;
    this.pos++;
    return true;
  }

  /** At the opening quote. Fast path: no escapes → one slice. */
  private parseString(): string {
    const start = this.pos + 1;
    const i = this.plain(start);
    if (this.text.charCodeAt(i) === C.Quote) {
      this.pos = i + 1;
      return this.text.slice(start, i);
    }
    return this.parseStringSlow(start, i);
  }

  /** Index of the first '"', '\\', control character, surrogate or the end, from `i`. */
  private plain(i: number): number {
    const { text } = this;
    for (; ; i++) {
      const c = text.charCodeAt(i); // NaN past the end, caught by `c !== c`
      if (c === C.Quote || c === C.Backslash || c < C.Space || (c & 0xf800) === 0xd800 || c !== c) return i;
    }
  }

  /** Handles escapes, surrogates and errors; `i` is the first special char. */
  private parseStringSlow(start: number, i: number): string {
    const { text } = this;
    let out = text.slice(start, i);
    for (;;) {
      if (i >= text.length) this.fail("unterminated string", start - 1);
      const c = text.charCodeAt(i);
      if (c === C.Quote) {
        this.pos = i + 1;
        return out;
      }
      if (c < C.Space) this.fail("unescaped control character in string", i);
      if (c === C.Backslash) {
        const e = text.charAt(i + 1);
        const simple = SIMPLE_ESCAPES[e];
        if (simple !== undefined) {
          out += simple;
          i += 2;
        } else {
          if (e !== "u") this.fail("invalid escape", i);
          const unit = this.hex4(i + 2);
          if (unit >= 0xdc00 && unit <= 0xdfff) this.fail("lone surrogate escape", i);
          if (unit >= 0xd800 && unit <= 0xdbff) {
            const low = text.startsWith("\\u", i + 6) ? this.hex4(i + 8) : -1;
            if (low < 0xdc00 || low > 0xdfff) this.fail("lone surrogate escape", i);
            out += String.fromCharCode(unit, low);
            i += 12;
          } else {
            out += String.fromCharCode(unit);
            i += 6;
          }
        }
      } else if ((c & 0xf800) === 0xd800) {
        // A raw surrogate is only valid as a high+low pair.
        const low = text.charCodeAt(i + 1);
        if (c > 0xdbff || !(low >= 0xdc00 && low <= 0xdfff)) this.fail("lone surrogate", i);
        out += text.slice(i, i + 2);
        i += 2;
      }
      const j = this.plain(i);
      out += text.slice(i, j);
      i = j;
    }
  }

  private hex4(at: number): number {
    let n = 0;
    for (let k = at; k < at + 4; k++) {
      const c = this.text.charCodeAt(k);
      const d =
        c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : c >= 0x41 && c <= 0x46 ? c - 0x37 : -1;
      if (d < 0) this.fail("invalid \\u escape", at - 2);
      n = n * 16 + d;
    }
    return n;
  }

  /** -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
  private parseNumber(): number {
    const { text } = this;
    const start = this.pos;
    let i = text.charCodeAt(start) === C.Minus ? start + 1 : start;
    if (text.charCodeAt(i) === C.Zero) {
      if (isDigit(text.charCodeAt(++i))) this.fail("leading zero in number", start);
    } else {
      i = this.digits(i, start);
    }
    const dot = text.charCodeAt(i) === C.Dot;
    if (dot) i = this.digits(i + 1, start);
    const e = text.charCodeAt(i);
    const exp = e === C.e || e === C.E;
    if (exp) {
      const sign = text.charCodeAt(++i);
      i = this.digits(sign === C.Plus || sign === C.Minus ? i + 1 : i, start);
    }
    // The slice matches JSON's grammar, which is a subset of Number()'s, so the value
    // is exactly what JSON.parse would produce.
    const n = Number(text.slice(start, i));
    if (!Number.isFinite(n)) this.fail("number out of range", start);
    // A fraction a double cannot hold: 1e-400 reads as 0, 100.000000000000001 as 100. An
    // integer field would take a whole number the client did not send (past its maximum,
    // or 0 for "the default"), so such a number is refused wherever it is.
    if (Number.isInteger(n) && (dot || exp) && !wholeNumberText(text.slice(start, i)))
      this.fail("number is not whole but reads as a whole number", start);
    this.pos = i;
    return n;
  }

  /** Index after a run of one or more digits at `i`; none is an invalid number. */
  private digits(i: number, start: number): number {
    const { text } = this;
    if (!isDigit(text.charCodeAt(i))) this.fail("invalid number", start);
    do i++;
    while (isDigit(text.charCodeAt(i)));
    return i;
  }

  private literal<T>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) this.unexpected();
    this.pos += word.length;
    return value;
  }

  /** Only the four JSON whitespace characters; not NBSP, not U+2028, not a BOM. */
  private skipWs(): void {
    const { text } = this;
    let i = this.pos;
    for (;;) {
      const c = text.charCodeAt(i);
      if (c !== C.Space && c !== C.Lf && c !== C.Cr && c !== C.Tab) break;
      i++;
    }
    this.pos = i;
  }

  private unexpected(expected?: string): never {
    const { text, pos } = this;
    if (pos >= text.length) this.fail("unexpected end of input");
    // Echo one character (a whole surrogate pair at most), JSON-escaped.
    const cp = text.codePointAt(pos) ?? 0;
    const what = `unexpected character ${quote(String.fromCodePoint(cp))}`;
    return this.fail(expected === undefined ? what : `${what}, ${expected}`);
  }

  private fail(message: string, at: number = this.pos): never {
    throw new WireError(`${message} at offset ${at}`);
  }
}

function isDigit(c: number): boolean {
  return c >= C.Zero && c <= C.Nine;
}
