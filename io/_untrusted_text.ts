/**
 * Renders untrusted strings (tensor names, storage keys and pickled module
 * names from a file; what an unauthenticated network peer sent) safely inside
 * messages: length capped so a hostile name cannot flood a log, control and
 * formatting characters escaped so it cannot drive or fool a terminal.
 */

/** C0 and C1 control characters. */
// deno-lint-ignore no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/g;
/** Invisible formatting (bidirectional overrides, zero-width marks) and line or paragraph separators. */
const FORMAT_CHARS = /[\p{Cf}\u2028\u2029]/gu;

/**
 * `s` with control characters as `\xNN` and invisible formatting characters
 * (which could reorder or hide what a terminal shows) as `\u{NNNN}`, cut to
 * `limit` characters.
 */
export function printable(s: string, limit = 120): string {
  const escaped = s.replace(
    CONTROL_CHARS,
    (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`,
  ).replace(FORMAT_CHARS, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);
  return escaped.length > limit ? `${escaped.slice(0, limit)}…` : escaped;
}

/** `s` as a JSON string literal (which escapes control characters), cut to `limit` characters. */
export function quoted(s: string, limit = 80): string {
  return JSON.stringify(s.length > limit ? `${s.slice(0, limit)}…` : s);
}
