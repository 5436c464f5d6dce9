/**
 * Loads torch.save checkpoints without Python: the zip format (torch ≥ 1.6)
 * and the legacy format (five pickles, then raw storages). Tensors become
 * TorchTensors ({dtype, shape, data}); only the names a state dict or an
 * optimizer state needs are allowed, as with torch.load(weights_only=True).
 */
import { printable, quoted } from "./_untrusted_text.ts";
import { describePy, unpickle, type UnpickleOptions } from "./pickle.ts";
import { dtypeSize, isDim } from "./st_tensor.ts";
import { StorageType, torchBuild, torchGlobals } from "./torch_globals.ts";
import { TensorAssembler, TorchStorage } from "./torch_tensor.ts";
import { readZipDirectory, readZipEntry, type ZipEntry } from "./zip.ts";

export { TorchTensor } from "./torch_tensor.ts";
export { flattenStateDict, stripModulePrefix, toJsonValue } from "./state_dict.ts";

/** Options of loadTorchFile. */
export interface TorchLoadOptions {
  /**
   * Most bytes that strided (non-contiguous) tensors may be copied into, in
   * total. Default: 4 × the file size + 1 MiB, which no honest checkpoint
   * exceeds unless it saved expanded (stride-0) tensors.
   */
  maxMaterializedBytes?: number;
  /** Most elements the pickle's lists, tuples and dicts may hold together (default 2^24). */
  maxElements?: number;
}

type Fail = (problem: string) => never;

const LEGACY_MAGIC = 0x1950a86a20f9469cfc6cn;
const LEGACY_PROTOCOL = 1001;
/** A zip starts with a local file header, or with the end record when it is empty. */
const ZIP_MAGICS = [[0x50, 0x4b, 0x03, 0x04], [0x50, 0x4b, 0x05, 0x06]];

/**
 * Loads a torch.save checkpoint from `bytes`. Dicts come back as Maps (an
 * optimizer state keeps its int keys), tuples as frozen arrays and tensors as
 * TorchTensor, whose data is a view of `bytes` when the tensor is contiguous.
 * @example
 * const sd = loadTorchFile(Deno.readFileSync("model.pt"), "model.pt") as Map<string, unknown>;
 */
export function loadTorchFile(
  bytes: Uint8Array,
  source = "<buffer>",
  options: TorchLoadOptions = {},
): unknown {
  const budget = options.maxMaterializedBytes ?? 4 * bytes.length + (1 << 20);
  const assembler = new TensorAssembler(source, budget);
  const isZip = ZIP_MAGICS.some((magic) => magic.every((b, i) => bytes[i] === b));
  const limits = options.maxElements === undefined ? {} : { maxElements: options.maxElements };
  const value = isZip
    ? loadZip(bytes, source, assembler, limits)
    : loadLegacy(bytes, source, assembler, limits);
  assembler.finish();
  return value;
}

/** Reads and loads the checkpoint at `path` (errors name the path). */
export function readTorchFile(path: string, options: TorchLoadOptions = {}): unknown {
  return loadTorchFile(Deno.readFileSync(path), path, options);
}

/** The common part of both formats' persistent ids: ("storage", StorageType, key, location, numel, ...). */
function storageFromId(pid: unknown, expectedLength: number, fail: Fail) {
  if (!Array.isArray(pid) || pid[0] !== "storage") {
    return fail(`persistent id ${preview(pid)} is not a ("storage", ...) tuple`);
  }
  if (pid.length !== expectedLength) {
    fail(`storage persistent id has ${pid.length} fields, expected ${expectedLength}`);
  }
  const [, type, key, location, numel] = pid;
  if (!(type instanceof StorageType)) {
    return fail(`storage persistent id names ${preview(type)}, not a torch storage type`);
  }
  if (typeof key !== "string") return fail(`storage key ${preview(key)} is not a string`);
  if (typeof location !== "string") {
    return fail(`storage location ${preview(location)} is not a string`);
  }
  if (!isDim(numel)) return fail(`storage ${quoted(key)} has element count ${preview(numel)}`);
  return { dtype: type.dtype, key, numel };
}

/** One storage per key; a second reference must agree on dtype and size. */
function internStorage(
  storages: Map<string, TorchStorage>,
  id: { dtype: TorchStorage["dtype"]; key: string; numel: number },
  fail: Fail,
): TorchStorage {
  const known = storages.get(id.key);
  if (known === undefined) {
    const storage = new TorchStorage(id.key, id.dtype, id.numel);
    storages.set(id.key, storage);
    return storage;
  }
  if (known.dtype !== id.dtype || known.numel !== id.numel) {
    fail(
      `storage ${
        quoted(id.key)
      } is referenced as ${known.dtype}×${known.numel} and as ${id.dtype}×${id.numel}`,
    );
  }
  return known;
}

/** Limits passed to every unpickling of one file. */
type Limits = Pick<UnpickleOptions, "maxElements">;

function loadZip(
  bytes: Uint8Array,
  source: string,
  assembler: TensorAssembler,
  limits: Limits,
): unknown {
  const fail: Fail = (problem) => assembler.fail(problem);
  const entries = readZipDirectory(bytes, source);
  // Like torch's reader: the first entry's top-level folder names the archive.
  const first = entries[0];
  if (first === undefined) return fail("the zip archive is empty");
  const slash = first.name.indexOf("/");
  if (slash <= 0) return fail(`entry ${quoted(first.name)} is not inside a top-level folder`);
  const prefix = first.name.slice(0, slash);
  const byName = new Map<string, ZipEntry>(entries.map((e) => [e.name, e]));
  const read = (name: string): Uint8Array | undefined => {
    const entry = byName.get(`${prefix}/${name}`);
    return entry && readZipEntry(bytes, entry, { source });
  };

  const byteorder = read("byteorder");
  if (byteorder !== undefined && new TextDecoder().decode(byteorder) !== "little") {
    fail(
      `storages are stored ${
        new TextDecoder().decode(byteorder).slice(0, 20)
      }-endian; only little-endian is supported`,
    );
  }
  const pickle = read("data.pkl");
  if (pickle === undefined) {
    return fail(`no ${quoted(`${prefix}/data.pkl`)} in the archive: not a torch.save file`);
  }

  const storages = new Map<string, TorchStorage>();
  const persistentLoad = (pid: unknown): TorchStorage => {
    const id = storageFromId(pid, 5, fail);
    const known = storages.has(id.key);
    const storage = internStorage(storages, id, fail);
    if (!known) {
      const data = read(`data/${id.key}`);
      if (data === undefined) {
        fail(`storage ${quoted(id.key)} has no entry ${quoted(`${prefix}/data/${id.key}`)}`);
      }
      const want = id.numel * dtypeSize(id.dtype);
      if (data.length !== want) {
        fail(
          `storage ${quoted(id.key)} holds ${data.length} bytes, expected ${id.numel} × ${
            dtypeSize(id.dtype)
          } = ${want}`,
        );
      }
      storage.data = data;
    }
    return storage;
  };
  return unpickle(pickle, {
    ...limits,
    ...pickleHooks(assembler, source),
    source: `${source} [${printable(`${prefix}/data.pkl`)}]`,
    persistentLoad,
  }).value;
}

function pickleHooks(assembler: TensorAssembler, source: string): UnpickleOptions {
  return { findGlobal: torchGlobals(assembler, source), build: torchBuild(assembler) };
}

function loadLegacy(
  bytes: Uint8Array,
  source: string,
  assembler: TensorAssembler,
  limits: Limits,
): unknown {
  const fail: Fail = (problem) => assembler.fail(problem);
  const noGlobals = (module: string, name: string): never =>
    fail(`the legacy header references ${module}.${name}`);
  const header = (start: number) => unpickle(bytes, { source, start, findGlobal: noGlobals });

  let magic;
  try {
    magic = header(0);
  } catch (e) {
    return fail(
      `not a torch.save file: neither a zip archive nor a legacy pickle (${(e as Error).message})`,
    );
  }
  if (magic.value !== LEGACY_MAGIC) {
    fail("not a torch.save file: the legacy magic number is missing");
  }
  const protocol = header(magic.end);
  if (protocol.value !== LEGACY_PROTOCOL) {
    fail(`legacy protocol version ${preview(protocol.value)}, expected ${LEGACY_PROTOCOL}`);
  }
  const sysInfo = header(protocol.end);
  if (!(sysInfo.value instanceof Map) || sysInfo.value.get("little_endian") !== true) {
    fail("the checkpoint was written on a big-endian machine or its sys-info header is malformed");
  }

  const storages = new Map<string, TorchStorage>();
  const persistentLoad = (pid: unknown): TorchStorage => {
    const id = storageFromId(pid, 6, fail);
    if ((pid as unknown[])[5] !== null) {
      fail(`storage ${quoted(id.key)} is a storage view (torch < 0.4), which is not supported`);
    }
    return internStorage(storages, id, fail);
  };
  const object = unpickle(bytes, {
    ...limits,
    ...pickleHooks(assembler, source),
    source,
    start: sysInfo.end,
    persistentLoad,
  });
  const keys = header(object.end);
  if (!Array.isArray(keys.value)) fail(`the storage key list is ${preview(keys.value)}`);

  // After the pickles: for each key, an int64 element count, then the storage's raw bytes.
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = keys.end;
  for (const key of keys.value as unknown[]) {
    const storage = typeof key === "string" ? storages.get(key) : undefined;
    if (storage === undefined) {
      return fail(`storage key ${preview(key)} in the key list is not used by the pickle`);
    }
    if (storage.data !== undefined) {
      fail(`storage key ${quoted(storage.key)} appears twice in the key list`);
    }
    if (at + 8 > bytes.length) {
      fail(`storage ${quoted(storage.key)}: truncated before its element count at byte ${at}`);
    }
    const count = view.getBigInt64(at, true);
    if (count !== BigInt(storage.numel)) {
      fail(
        `storage ${quoted(storage.key)} holds ${count} elements, the pickle says ${storage.numel}`,
      );
    }
    const length = storage.numel * dtypeSize(storage.dtype);
    if (at + 8 + length > bytes.length) {
      fail(
        `storage ${quoted(storage.key)}: ${length} bytes at byte ${
          at + 8
        } run past the end of the file`,
      );
    }
    storage.data = bytes.subarray(at + 8, at + 8 + length);
    at += 8 + length;
  }
  return object.value;
}

function preview(v: unknown): string {
  if (typeof v === "string") return quoted(v, 40);
  if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") return String(v);
  return describePy(v);
}
