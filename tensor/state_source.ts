/**
 * What `loadStateDict` accepts, as PyTorch users hand it over: another
 * module's stateDict() (tensors), a weights file's or checkpoint file's
 * tensors (safetensors entries), a checkpoint file itself, or a whole loaded
 * checkpoint (CheckpointManager.loadLatest()), from which the file of the
 * right name is taken. Everything becomes one map of named byte sources.
 */
import { isStTensor, type StTensor } from "../io/st_tensor.ts";
import { Tensor } from "./tensor.ts";

/** A tensor as a state-dict source: anything with a shape and raw little-endian bytes. */
export interface StateTensor {
  /** Size of each dim. */
  shape: readonly number[];
  /** Element type by dtrain's name, lower case ("f32", "bf16", "i64", …). */
  dtype: string;
  /** The raw little-endian, C-contiguous bytes. */
  bytes(): Uint8Array;
}

/** One tensor of a state dict in any of the forms dtrain hands out. */
export type StateEntry = StateTensor | StTensor | Tensor;

/** A file of named tensors, as CheckpointManager returns each checkpoint file. */
export interface TensorFileLike {
  /** The tensors by name. */
  tensors: ReadonlyMap<string, StateEntry>;
  /** The file's string metadata, if any. */
  metadata?: Record<string, string>;
}

/** A loaded checkpoint, as CheckpointManager.load() and loadLatest() return it. */
export interface CheckpointLike {
  /** The checkpoint's folder. */
  dir?: string;
  /** Its tensor files by name ("model", "optimizer", …). */
  files: ReadonlyMap<string, TensorFileLike>;
}

/** Everything loadStateDict accepts. */
export type StateDictSource = ReadonlyMap<string, StateEntry> | TensorFileLike | CheckpointLike;

/**
 * The file `name` of a loaded checkpoint, the file itself, or the map as
 * given; `what` names the caller in errors ("Module.loadStateDict").
 */
export function pickTensors(
  source: StateDictSource | null | undefined,
  name: string,
  what: string,
): ReadonlyMap<string, StateEntry> {
  if (source === null || source === undefined) {
    throw new TypeError(
      `${what}: got ${source} instead of a state dict (CheckpointManager.loadLatest() returns null ` +
        "when the folder holds no checkpoint yet)",
    );
  }
  if (source instanceof Map) return source;
  if ("files" in source && source.files instanceof Map) {
    const file = source.files.get(name);
    if (!file) {
      const where = source.dir ? ` ${source.dir}` : "";
      const have = [...source.files.keys()].join(", ") || "none";
      throw new Error(
        `${what}: the checkpoint${where} has no "${name}" file (it has: ${have}); save it with ` +
          `tensorFile("${name}", …) or pass the file to load`,
      );
    }
    return file.tensors;
  }
  if ("tensors" in source && source.tensors instanceof Map) return source.tensors;
  throw new TypeError(
    `${what}: expected a Map of tensors, a checkpoint file ({ tensors }) or a loaded checkpoint ` +
      `({ files }), got ${describe(source)}`,
  );
}

/** An entry as shape, dtype and bytes; throws naming the key when it is none of the known forms. */
export function asStateTensor(key: string, v: unknown, what: string): StateTensor {
  if (v instanceof Tensor) return { shape: v.shape, dtype: v.dtype, bytes: () => v.toBytes() };
  if (isStTensor(v)) return { shape: v.shape, dtype: v.dtype.toLowerCase(), bytes: () => v.data };
  const s = v as Partial<StateTensor> | null;
  if (
    s !== null && typeof s === "object" && Array.isArray(s.shape) &&
    typeof s.dtype === "string" && typeof s.bytes === "function"
  ) {
    return s as StateTensor;
  }
  throw new TypeError(
    `${what}: entry "${key}" is ${describe(v)}, not a tensor (a Tensor, a safetensors entry ` +
      "{ dtype, shape, data } or { shape, dtype, bytes() })",
  );
}

function describe(v: unknown): string {
  if (v === null || typeof v !== "object") return String(v);
  const keys = Object.keys(v).slice(0, 6).join(", ");
  return `${v.constructor?.name ?? "an object"} { ${keys} }`;
}
