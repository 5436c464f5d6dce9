/**
 * JSON.parse for records that anyone may have written (run.json, config.json, metrics lines,
 * a checkpoint's state): the text's size and nesting depth are checked first, in one pass that
 * uses no recursion, so a hostile file fails with an error naming it instead of exhausting the
 * stack or the memory of whatever walks the parsed value afterwards.
 */

/** How deep a record's JSON may nest: dtrain writes at most about ten levels. */
export const MAX_RECORD_DEPTH = 64;

/** Limits of one parse. */
export interface JsonBounds {
  /** deepest nesting of arrays and objects allowed (default MAX_RECORD_DEPTH) */
  maxDepth?: number;
  /** longest text allowed, in UTF-16 code units (default: no limit) */
  maxChars?: number;
}

/** A JSON text beyond its bounds; the message says which bound and where. */
export class JsonBoundsError extends TypeError {
  override name = "JsonBoundsError";
}

/**
 * The deepest nesting of `[` and `{` outside strings, scanning at most until
 * `stopAbove` is exceeded (then that depth and the position are returned).
 */
export function jsonNesting(
  text: string,
  stopAbove = Infinity,
): { depth: number; at: number } {
  let depth = 0, deepest = 0, inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stopAbove) return { depth: deepest, at: i };
      }
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return { depth: deepest, at: -1 };
}

/**
 * Checks `text` against `bounds`, then JSON.parse()s it. Throws
 * JsonBoundsError naming `what` (a file, or file:line) for a text too long or
 * too deep; JSON.parse's own SyntaxError for malformed JSON.
 *
 * @example
 * ```ts
 * parseBoundedJson('{"a": [1]}', "run.json"); // { a: [1] }
 * parseBoundedJson("[".repeat(100) + "]".repeat(100), "x.json"); // throws: deeper than 64 levels
 * ```
 */
export function parseBoundedJson(text: string, what: string, bounds: JsonBounds = {}): unknown {
  const maxDepth = bounds.maxDepth ?? MAX_RECORD_DEPTH;
  if (bounds.maxChars !== undefined && text.length > bounds.maxChars) {
    throw new JsonBoundsError(
      `${what}: ${text.length} characters, more than the ${bounds.maxChars} a record may have`,
    );
  }
  const { depth, at } = jsonNesting(text, maxDepth);
  if (depth > maxDepth) {
    throw new JsonBoundsError(
      `${what}: JSON nested deeper than ${maxDepth} levels (at character ${at}); ` +
        `dtrain never writes such a record`,
    );
  }
  return JSON.parse(text);
}
