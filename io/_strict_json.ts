/**
 * A strict JSON parser for untrusted file headers: unlike JSON.parse it
 * rejects duplicate keys, bounds the nesting depth, and returns objects as
 * Maps in document order (so "__proto__" or "0" keep meaning and position).
 */

/** A parsed JSON value; objects are Maps in document order. */
export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;
/** A parsed JSON object. */
export type JsonObject = Map<string, JsonValue>;

import { quoted } from "./_untrusted_text.ts";

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

class Parser {
  pos = 0;
  constructor(readonly text: string, readonly maxDepth: number) {}

  fail(problem: string): never {
    throw new SyntaxError(`${problem} at character ${this.pos}`);
  }

  skipWhitespace(): void {
    const t = this.text;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      this.pos++;
    }
  }

  value(depth: number): JsonValue {
    this.skipWhitespace();
    if (this.pos >= this.text.length) this.fail("unexpected end of input");
    const c = this.text[this.pos];
    if (c === "{") return this.object(depth);
    if (c === "[") return this.array(depth);
    if (c === '"') return this.string();
    if (c === "t") return this.literal("true", true);
    if (c === "f") return this.literal("false", false);
    if (c === "n") return this.literal("null", null);
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
    return this.fail(`unexpected character ${JSON.stringify(c)}`);
  }

  enter(depth: number): void {
    if (depth >= this.maxDepth) this.fail(`nesting deeper than ${this.maxDepth} levels`);
    this.pos++;
  }

  object(depth: number): JsonObject {
    this.enter(depth);
    const map: JsonObject = new Map();
    this.skipWhitespace();
    if (this.text[this.pos] === "}") {
      this.pos++;
      return map;
    }
    for (;;) {
      this.skipWhitespace();
      if (this.text[this.pos] !== '"') this.fail("expected a string key");
      const keyAt = this.pos;
      const key = this.string();
      if (map.has(key)) {
        this.pos = keyAt;
        this.fail(`duplicate key ${quoted(key)}`);
      }
      this.skipWhitespace();
      if (this.text[this.pos] !== ":") this.fail("expected ':'");
      this.pos++;
      map.set(key, this.value(depth + 1));
      this.skipWhitespace();
      const c = this.text[this.pos];
      this.pos++;
      if (c === "}") return map;
      if (c !== ",") {
        this.pos--;
        this.fail("expected ',' or '}'");
      }
    }
  }

  array(depth: number): JsonValue[] {
    this.enter(depth);
    const items: JsonValue[] = [];
    this.skipWhitespace();
    if (this.text[this.pos] === "]") {
      this.pos++;
      return items;
    }
    for (;;) {
      items.push(this.value(depth + 1));
      this.skipWhitespace();
      const c = this.text[this.pos];
      this.pos++;
      if (c === "]") return items;
      if (c !== ",") {
        this.pos--;
        this.fail("expected ',' or ']'");
      }
    }
  }

  string(): string {
    const t = this.text;
    const start = this.pos;
    let i = start + 1;
    for (;;) {
      if (i >= t.length) this.fail("unterminated string");
      const c = t.charCodeAt(i);
      if (c === 0x22) break;
      if (c < 0x20) {
        this.pos = i;
        this.fail("control character in string");
      }
      i += c === 0x5c ? 2 : 1;
    }
    this.pos = i + 1;
    let s: string;
    try {
      // The token is delimited; JSON.parse decodes its escapes exactly.
      s = JSON.parse(t.slice(start, i + 1));
    } catch {
      this.pos = start;
      return this.fail("invalid escape in string");
    }
    if (!s.isWellFormed()) {
      this.pos = start;
      this.fail("string contains an unpaired surrogate escape");
    }
    return s;
  }

  number(): number {
    NUMBER.lastIndex = this.pos;
    const m = NUMBER.exec(this.text);
    if (m === null) this.fail("invalid number");
    this.pos += m[0].length;
    return Number(m[0]);
  }

  literal<T>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) this.fail(`unexpected token, expected ${word}`);
    this.pos += word.length;
    return value;
  }
}

/**
 * Parses `text` as one JSON value, throwing a SyntaxError that names the
 * problem and its character position.
 * @example parseStrictJson('{"a": [1, 2]}') // Map { "a" => [1, 2] }
 */
export function parseStrictJson(text: string, maxDepth = 64): JsonValue {
  const parser = new Parser(text, maxDepth);
  const value = parser.value(0);
  parser.skipWhitespace();
  if (parser.pos !== text.length) parser.fail("unexpected text after the JSON value");
  return value;
}

/** Names the JSON type of `value` for error messages ("an object", "a number", ...). */
export function describeJson(value: JsonValue): string {
  if (value === null) return "null";
  if (value instanceof Map) return "an object";
  if (Array.isArray(value)) return "an array";
  return `a ${typeof value}`;
}

/** A short JSON rendering of `value` for error messages. */
export function previewJson(value: JsonValue, limit = 60): string {
  const plain = (v: JsonValue): unknown =>
    v instanceof Map
      ? Object.fromEntries([...v].map(([k, x]) => [k, plain(x)]))
      : Array.isArray(v)
      ? v.map(plain)
      : v;
  const s = JSON.stringify(plain(value)) ?? String(value);
  return s.length > limit ? `${s.slice(0, limit)}…` : s;
}
