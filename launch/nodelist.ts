/**
 * Slurm's compact host lists (`gpu[01-04,07]`, `a[1-2],b3`,
 * `rack[1-2]-n[01-02]`): the first host and the number of hosts found without
 * expanding the list, and the expansion, bounded. Padding follows Slurm: a
 * range whose first number has leading zeros keeps that many digits.
 */

/** Longest host list accepted (characters). */
export const MAX_NODELIST_CHARS = 1 << 16;
/** Most hosts an expansion returns. */
export const MAX_EXPANDED_HOSTS = 1 << 16;

/** A host list that does not follow Slurm's grammar; the message names the list and the fault. */
export class NodelistError extends RangeError {
  override name = "NodelistError";
}

/** One range of a bracket group: lo … hi, printed with `width` digits (0 = no padding). */
interface Range {
  lo: number;
  hi: number;
  width: number;
}

/** A host pattern: literal text and bracket groups in turn, e.g. ["gpu", [01-04, 07]]. */
type Part = string | Range[];

function fail(list: string, why: string): never {
  const shown = list.length > 80 ? `${list.slice(0, 77)}...` : list;
  throw new NodelistError(`host list ${JSON.stringify(shown)}: ${why}`);
}

/** Splits a list at the commas outside brackets. */
function topLevelItems(list: string): string[] {
  const items: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < list.length; i++) {
    const c = list[i];
    if (c === "[") {
      if (depth++ > 0) fail(list, `nested "[" at character ${i + 1}`);
    } else if (c === "]") {
      if (--depth < 0) fail(list, `"]" without "[" at character ${i + 1}`);
    } else if (c === "," && depth === 0) {
      items.push(list.slice(start, i));
      start = i + 1;
    }
  }
  if (depth !== 0) fail(list, `a "[" is not closed`);
  items.push(list.slice(start));
  return items;
}

const HOST_TEXT = /^[A-Za-z0-9._-]*$/;
const RANGE = /^(\d{1,9})(?:-(\d{1,9}))?$/;

function parseGroup(list: string, body: string): Range[] {
  if (body === "") fail(list, `empty brackets "[]"`);
  return body.split(",").map((r) => {
    const m = RANGE.exec(r);
    if (!m) fail(list, `${JSON.stringify(r)} in brackets is not a number or a range like 01-04`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) fail(list, `range ${r} runs backwards`);
    const width = m[1]!.length > 1 && m[1]!.startsWith("0") ? m[1]!.length : 0;
    return { lo, hi, width };
  });
}

function parseItem(list: string, item: string): Part[] {
  if (item === "") fail(list, "an empty host name (two commas, or a comma at an end)");
  const parts: Part[] = [];
  let at = 0;
  while (at < item.length) {
    const open = item.indexOf("[", at);
    const text = item.slice(at, open === -1 ? item.length : open);
    if (!HOST_TEXT.test(text)) {
      fail(list, `${JSON.stringify(text)} holds a character a host name cannot have`);
    }
    if (text !== "") parts.push(text);
    if (open === -1) break;
    const close = item.indexOf("]", open);
    parts.push(parseGroup(list, item.slice(open + 1, close)));
    at = close + 1;
  }
  return parts;
}

function parse(list: string): Part[][] {
  if (typeof list !== "string" || list.trim() === "") fail(String(list), "is empty");
  if (list.length > MAX_NODELIST_CHARS) {
    fail(list, `is longer than ${MAX_NODELIST_CHARS} characters`);
  }
  return topLevelItems(list.trim()).map((item) => parseItem(list, item));
}

const show = (n: number, width: number) => String(n).padStart(width, "0");

/** Hosts of one item, as a count (may exceed 2^53 only in theory: BigInt). */
function itemCount(parts: Part[]): bigint {
  return parts.reduce(
    (acc, p) =>
      typeof p === "string" ? acc : acc * p.reduce((s, r) => s + BigInt(r.hi - r.lo + 1), 0n),
    1n,
  );
}

/** The first host of a list, without expanding it (`gpu[01-04,07]` → `gpu01`). */
export function firstHost(list: string): string {
  return parse(list)[0]!.map((p) => typeof p === "string" ? p : show(p[0]!.lo, p[0]!.width)).join(
    "",
  );
}

/** How many hosts a list names (duplicates counted), without expanding it. */
export function hostCount(list: string): number {
  const n = parse(list).reduce((s, item) => s + itemCount(item), 0n);
  return n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n);
}

/**
 * Every host of a list, in Slurm's order (`a[1-2],b3` → a1, a2, b3); more
 * than `max` hosts is an error.
 */
export function expandNodelist(list: string, max = MAX_EXPANDED_HOSTS): string[] {
  const items = parse(list);
  const total = items.reduce((s, item) => s + itemCount(item), 0n);
  if (total > BigInt(max)) fail(list, `names ${total} hosts, more than the ${max} expanded`);
  const out: string[] = [];
  for (const item of items) {
    let names = [""];
    for (const p of item) {
      if (typeof p === "string") names = names.map((n) => n + p);
      else {
        const next: string[] = [];
        for (const n of names) {
          for (const r of p) for (let v = r.lo; v <= r.hi; v++) next.push(n + show(v, r.width));
        }
        names = next;
      }
    }
    out.push(...names);
  }
  return out;
}
