/**
 * Helpers that turn a loaded checkpoint into flat, dotted names: nested dicts
 * (model and optimizer state) become "optimizer_state_dict.state.0.exp_avg"
 * style keys, the "module." prefix that DDP adds can be dropped, and
 * non-tensor values convert to JSON (e.g. optimizer param groups). A pickle
 * can share one dict under many names through its memo, so the expanded size
 * is counted first, in time linear in the distinct objects, and refused past
 * a limit instead of being built.
 */
import { isStTensor, type StTensor } from "./st_tensor.ts";

/** Deepest nesting followed; real checkpoints nest a handful of levels, hostile ones could exhaust the stack. */
const MAX_DEPTH = 512;
/** Most names flattenStateDict() makes by default (a real state dict has thousands). */
export const MAX_FLAT_ENTRIES = 1 << 22;
/** Most values toJsonValue() makes by default. */
export const MAX_JSON_VALUES = 1 << 20;
/**
 * Sharing allowed by default: the expanded size may be this many times the
 * distinct entries (plus a small allowance), so the work stays linear in the
 * file. A checkpoint that saves one state dict under two names is within it.
 */
const SHARING_FACTOR = 4;
const SHARING_ALLOWANCE = 1024;

/**
 * How many leaves (or, with `countInner`, values of every kind) `value`
 * expands to when every shared container is written out at each place it
 * appears. Memoised per container, so shared structure costs its size once.
 * A float: absurd sharing makes it huge or Infinity, which only meets a
 * limit. A cycle or nesting past MAX_DEPTH throws; the caller's walk then
 * reports it with its path.
 */
function expandedSize(
  value: unknown,
  children: (v: unknown) => Iterable<unknown> | null,
  countInner: boolean,
): { expanded: number; distinct: number } {
  const sizes = new Map<unknown, number>();
  let distinct = 0;
  const open = new Set<unknown>();
  const visit = (v: unknown, depth: number): number => {
    const inner = children(v);
    if (inner === null) return 1;
    const known = sizes.get(v);
    if (known !== undefined) return known;
    if (open.has(v) || depth >= MAX_DEPTH) throw new RangeError("cycle or too deep");
    open.add(v);
    let n = countInner ? 1 : 0;
    let any = false;
    for (const c of inner) {
      n += visit(c, depth + 1);
      distinct++;
      any = true;
    }
    open.delete(v);
    if (!any && !countInner) n = 1; // an empty dict is a leaf of its own
    sizes.set(v, n);
    return n;
  };
  const expanded = visit(value, 0);
  return { expanded, distinct };
}

/** The default limit for a value with `distinct` entries: linear in it, never above `cap`. */
function sharingLimit(distinct: number, cap: number): number {
  return Math.min(cap, SHARING_FACTOR * distinct + SHARING_ALLOWANCE);
}

/** Options of flattenStateDict(). */
export interface FlattenOptions {
  /**
   * Refuse to make more names than this. Default: 4 × the distinct dict
   * entries + 1024, at most MAX_FLAT_ENTRIES.
   */
  maxEntries?: number;
}

/**
 * Flattens nested dicts (Maps) into a Map from dotted name to value. Tensors
 * and every non-dict value (numbers, lists such as param_groups, ...) are
 * leaves; an empty dict is kept as a leaf so that no key disappears. A dict
 * shared under several names appears under each; when that would make more
 * than `maxEntries` names the call throws before building any.
 * @example
 * flattenStateDict(loadTorchFile(bytes)) // Map { "epoch" => 3, "model_state_dict.0.weight" => tensor, ... }
 */
export function flattenStateDict(
  obj: unknown,
  prefix = "",
  opts: FlattenOptions = {},
): Map<string, unknown> {
  if (!(obj instanceof Map)) {
    throw new TypeError(`flattenStateDict() needs a dict (Map), got ${typeof obj}`);
  }
  const dictValues = (v: unknown) => v instanceof Map ? v.values() : null;
  let size = 0, limit = opts.maxEntries ?? MAX_FLAT_ENTRIES;
  try {
    const { expanded, distinct } = expandedSize(obj, dictValues, false);
    size = expanded;
    limit = opts.maxEntries ?? sharingLimit(distinct, MAX_FLAT_ENTRIES);
  } catch { /* a cycle or too deep: the walk below names it with its path */ }
  if (size > limit) {
    throw new Error(
      `Cannot flatten: the dicts expand to ${formatCount(size)} names, more than the limit of ` +
        `${limit} (the file shares dicts under many names through the pickle memo, which no ` +
        `state dict needs)`,
    );
  }
  const out = new Map<string, unknown>();
  walk(obj, prefix, out, new Set());
  return out;
}

/** 12345 → "12345"; astronomically large → "about 9.2e18". */
function formatCount(n: number): string {
  return n < 1e9
    ? String(n)
    : Number.isFinite(n)
    ? `about ${n.toPrecision(2)}`
    : "unboundedly many";
}

function walk(
  dict: Map<unknown, unknown>,
  prefix: string,
  out: Map<string, unknown>,
  open: Set<unknown>,
): void {
  if (open.has(dict)) throw new Error(`Cannot flatten: the dict at "${prefix}" contains itself`);
  if (open.size >= MAX_DEPTH) {
    throw new Error(`Cannot flatten: dicts nest deeper than ${MAX_DEPTH} levels at "${prefix}"`);
  }
  open.add(dict);
  for (const [key, value] of dict) {
    if (typeof key !== "string" && typeof key !== "number" && typeof key !== "bigint") {
      throw new TypeError(
        `Cannot flatten key ${String(key)} under "${prefix}": only str and int keys make names`,
      );
    }
    const name = prefix === "" ? String(key) : `${prefix}.${key}`;
    if (value instanceof Map && value.size > 0) {
      walk(value, name, out, open);
      continue;
    }
    if (out.has(name)) throw new Error(`Cannot flatten: two entries both become "${name}"`);
    out.set(name, value);
  }
  open.delete(dict);
}

/**
 * Removes a leading "module." from every key when all keys have it (a state
 * dict saved from a DistributedDataParallel wrapper); otherwise returns `map`
 * unchanged.
 * @example stripModulePrefix(new Map([["module.0.weight", w]])) // Map { "0.weight" => w }
 */
export function stripModulePrefix<T>(map: Map<string, T>): Map<string, T> {
  const prefix = "module.";
  if (map.size === 0 || ![...map.keys()].every((k) => k.startsWith(prefix))) return map;
  return new Map([...map].map(([k, v]) => [k.slice(prefix.length), v]));
}

/** JSON value produced by toJsonValue(). */
export type JsonLike = null | boolean | number | string | JsonLike[] | { [key: string]: JsonLike };

/** Options of toJsonValue(). */
export interface ToJsonOptions {
  /**
   * Refuse to make more JSON values than this. Default: 4 × the distinct
   * values + 1024, at most MAX_JSON_VALUES.
   */
  maxValues?: number;
}

/**
 * Converts a non-tensor value of a checkpoint to JSON: dicts become objects
 * (int keys as strings), tuples and lists arrays. Throws for tensors, bytes
 * and ints beyond 2^53, which JSON cannot carry exactly, and (before
 * converting anything) when shared containers would expand past `maxValues`.
 * @example toJsonValue(paramGroups) // [{ lr: 0.001, betas: [0.9, 0.999], ... }]
 */
export function toJsonValue(value: unknown, opts: ToJsonOptions = {}): JsonLike {
  const containers = (v: unknown) =>
    v instanceof Map ? v.values() : Array.isArray(v) ? v.values() : null;
  let size = 0, limit = opts.maxValues ?? MAX_JSON_VALUES;
  try {
    const { expanded, distinct } = expandedSize(value, containers, true);
    size = expanded;
    limit = opts.maxValues ?? sharingLimit(distinct, MAX_JSON_VALUES);
  } catch { /* a cycle or too deep: convert() names it with its path */ }
  if (size > limit) {
    throw new TypeError(
      `Cannot convert the value to JSON: it expands to ${formatCount(size)} values, more than ` +
        `the limit of ${limit} (containers shared many times through the pickle memo)`,
    );
  }
  return convert(value, new Set(), "");
}

function convert(value: unknown, open: Set<unknown>, path: string): JsonLike {
  if (
    value === null || typeof value === "boolean" || typeof value === "number" ||
    typeof value === "string"
  ) return value;
  const where = path === "" ? "the value" : `"${path}"`;
  if (typeof value !== "object") {
    throw new TypeError(`Cannot convert ${where} (${typeof value}) to JSON`);
  }
  if (isStTensor(value as StTensor)) {
    throw new TypeError(`Cannot convert ${where} to JSON: it is a tensor`);
  }
  if (open.has(value)) throw new TypeError(`Cannot convert ${where} to JSON: it contains itself`);
  if (open.size >= MAX_DEPTH) {
    throw new TypeError(`Cannot convert ${where} to JSON: nested deeper than ${MAX_DEPTH} levels`);
  }
  open.add(value);
  let out: JsonLike;
  if (Array.isArray(value)) {
    out = value.map((v, i) => convert(v, open, `${path}[${i}]`));
  } else if (value instanceof Map) {
    const pairs: [string, JsonLike][] = [];
    for (const [k, v] of value) {
      if (typeof k !== "string" && typeof k !== "number") {
        throw new TypeError(`Cannot convert key ${String(k)} of ${where} to JSON`);
      }
      pairs.push([String(k), convert(v, open, path === "" ? String(k) : `${path}.${k}`)]);
    }
    out = Object.fromEntries(pairs);
  } else {
    throw new TypeError(`Cannot convert ${where} (${(value as object).constructor?.name}) to JSON`);
  }
  open.delete(value);
  return out;
}
