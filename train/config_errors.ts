/**
 * Error text for a training config that fails validation: every problem with
 * its full dotted path and the value given, and for a field that does not
 * exist the nearest valid one ("optim.learningRate is not a field; did you
 * mean optim.lr?"), found among the fields of its own section, then anywhere.
 */
import type { z } from "zod";

/** One level of a schema: the object's fields, each with its own schema. */
type Shape = Record<string, z.ZodType>;

/** The object schema under wrappers (default, prefault, nullable, optional), or null. */
function objectShape(schema: z.ZodType | undefined): Shape | null {
  let s: unknown = schema;
  for (let i = 0; i < 8 && s; i++) {
    const shape = (s as { shape?: Shape }).shape;
    if (shape && typeof shape === "object") return shape;
    s = (s as { def?: { innerType?: unknown } }).def?.innerType;
  }
  return null;
}

/** The fields of the object at `path` inside `root`, or null when there is none. */
function shapeAt(root: z.ZodType, path: readonly PropertyKey[]): Shape | null {
  let shape = objectShape(root);
  for (const key of path) {
    if (!shape || typeof key !== "string" || !Object.hasOwn(shape, key)) return null;
    shape = objectShape(shape[key]);
  }
  return shape;
}

/** Every field path of the schema ("optim.lr"), leaves and sections alike. */
function allPaths(shape: Shape, prefix: string[] = []): string[][] {
  const out: string[][] = [];
  for (const [k, v] of Object.entries(shape)) {
    out.push([...prefix, k]);
    const inner = objectShape(v);
    if (inner) out.push(...allPaths(inner, [...prefix, k]));
  }
  return out;
}

/** Lowercase without separators: "weight_decay", "weightDecay" and "Weight-Decay" meet. */
function normalize(s: string): string {
  return s.toLowerCase().replace(/[_\-\s.]/g, "");
}

/** Initials of the words of a camelCase or snake_case name: "learningRate" → "lr". */
function initials(s: string): string {
  const words = s.replace(/([a-z0-9])([A-Z])/g, "$1 $2").split(/[\s_\-]+/).filter((w) => w);
  return words.map((w) => w[0]!.toLowerCase()).join("");
}

/** Edit distance counting an adjacent transposition as one edit (optimal string alignment). */
export function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        v = Math.min(v, d[i - 2]![j - 2]! + 1);
      }
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * How close `wrong` is to the valid name `right`, lower is closer; null when
 * they are not plausibly the same field. Tiers: the same name spelled
 * differently (0), an abbreviation by initials or a small typo (1 + edits),
 * one name starting the other (10), one name inside the other (11).
 */
function closeness(wrong: string, right: string): number | null {
  const w = normalize(wrong), r = normalize(right);
  if (w === "" || r === "") return null;
  if (w === r) return 0;
  if (initials(wrong) === r || initials(right) === w) return 1;
  const edits = editDistance(w, r);
  if (edits <= Math.max(1, Math.floor(Math.min(w.length, r.length) / 3))) return 1 + edits;
  if (Math.min(w.length, r.length) < 3) return null;
  if (r.startsWith(w) || w.startsWith(r)) return 10;
  if (r.includes(w) || w.includes(r)) return 11;
  return null;
}

/** The closest names among `candidates` (all ties, at most 3), or none. */
export function nearestNames(wrong: string, candidates: readonly string[]): string[] {
  let best = Infinity;
  let out: string[] = [];
  for (const c of candidates) {
    const score = closeness(wrong, c);
    if (score === null || score > best) continue;
    if (score < best) [best, out] = [score, []];
    out.push(c);
  }
  return out.slice(0, 3);
}

/** "a", "a or b", "a, b or c" */
function orList(items: readonly string[]): string {
  return items.length <= 1
    ? items.join("")
    : `${items.slice(0, -1).join(", ")} or ${items[items.length - 1]}`;
}

/** The sentence for one unknown key at `path` (the section holding it). */
function unknownField(root: z.ZodType, path: readonly PropertyKey[], key: string): string {
  const section = path.map(String);
  const full = [...section, key].join(".");
  const fields = Object.keys(shapeAt(root, path) ?? {});
  const here = nearestNames(key, fields).map((f) => [...section, f].join("."));
  let guesses = here;
  if (guesses.length === 0) {
    // A field of another section: `lr` at the top is optim.lr.
    const everywhere = allPaths(objectShape(root) ?? {});
    const byName = new Map(everywhere.map((p) => [p[p.length - 1]!, p]));
    const names = nearestNames(key, everywhere.map((p) => p[p.length - 1]!));
    guesses = names.map((n) => byName.get(n)!.join("."));
  }
  if (guesses.length > 0) return `${full} is not a field; did you mean ${orList(guesses)}?`;
  const where = section.length === 0 ? "the config" : section.join(".");
  return `${full} is not a field; the fields of ${where} are ${fields.join(", ")}`;
}

function valueAt(obj: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = obj;
  for (const k of path) {
    if (v === null || typeof v !== "object") return undefined;
    v = (v as Record<PropertyKey, unknown>)[k];
  }
  return v;
}

/** Shows a value briefly: JSON, cut to 60 characters. */
function shown(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 60 ? `${text.slice(0, 60)}…` : text;
}

/**
 * One line per problem of a failed parse of `input` against `root`, e.g.
 * `optim.lr = -1: Too small: expected number to be >0` or
 * `optim.learningRate is not a field; did you mean optim.lr?`.
 */
export function describeConfigIssues(
  root: z.ZodType,
  input: unknown,
  issues: readonly z.core.$ZodIssue[],
  rootName = "(the config)",
): string[] {
  return issues.flatMap((iss) => {
    if (iss.code === "unrecognized_keys") {
      return iss.keys.map((k) => unknownField(root, iss.path, k));
    }
    const path = iss.path.map(String).join(".") || rootName;
    const value = valueAt(input, iss.path);
    return [`${path}${value === undefined ? "" : ` = ${shown(value)}`}: ${iss.message}`];
  });
}
