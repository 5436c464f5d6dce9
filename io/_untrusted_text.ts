/**
 * Renders untrusted strings from a file (tensor names, storage keys, pickled
 * module names) safely inside error messages: length capped so a hostile
 * name cannot flood a log, control characters escaped so it cannot drive a terminal.
 */

/** C0 and C1 control characters. */
// deno-lint-ignore no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/g;

/** `s` with control characters as `\xNN`, cut to `limit` characters. */
export function printable(s: string, limit = 120): string {
  const escaped = s.replace(
    CONTROL_CHARS,
    (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`,
  );
  return escaped.length > limit ? `${escaped.slice(0, limit)}…` : escaped;
}

/** `s` as a JSON string literal (which escapes control characters), cut to `limit` characters. */
export function quoted(s: string, limit = 80): string {
  return JSON.stringify(s.length > limit ? `${s.slice(0, limit)}…` : s);
}
