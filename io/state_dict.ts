/**
 * Helpers that turn a loaded checkpoint into flat, dotted names: nested dicts
 * (model and optimizer state) become "optimizer_state_dict.state.0.exp_avg"
 * style keys, the "module." prefix that DDP adds can be dropped, and
 * non-tensor values convert to JSON (e.g. optimizer param groups).
 */
import { isStTensor, type StTensor } from "./st_tensor.ts";

/** Deepest nesting followed; real checkpoints nest a handful of levels, hostile ones could exhaust the stack. */
const MAX_DEPTH = 512;

/**
 * Flattens nested dicts (Maps) into a Map from dotted name to value. Tensors
 * and every non-dict value (numbers, lists such as param_groups, ...) are
 * leaves; an empty dict is kept as a leaf so that no key disappears.
 * @example
 * flattenStateDict(loadTorchFile(bytes)) // Map { "epoch" => 3, "model_state_dict.0.weight" => tensor, ... }
 */
export function flattenStateDict(obj: unknown, prefix = ""): Map<string, unknown> {
  if (!(obj instanceof Map)) {
    throw new TypeError(`flattenStateDict() needs a dict (Map), got ${typeof obj}`);
  }
  const out = new Map<string, unknown>();
  walk(obj, prefix, out, new Set());
  return out;
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

/**
 * Converts a non-tensor value of a checkpoint to JSON: dicts become objects
 * (int keys as strings), tuples and lists arrays. Throws for tensors, bytes
 * and ints beyond 2^53, which JSON cannot carry exactly.
 * @example toJsonValue(paramGroups) // [{ lr: 0.001, betas: [0.9, 0.999], ... }]
 */
export function toJsonValue(value: unknown): JsonLike {
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
