/**
 * Seeded fuzz cases for the checkpoint readers: case i derives its own random
 * stream, builds one hostile input and checks that the reader returns something
 * consistent or throws a plain Error naming the file; anything else is a FuzzFailure.
 */
import { parseSafetensors, serializeSafetensors } from "../../io/safetensors.ts";
import { byteSizeOf, isDim, isStDType, ST_DTYPES, type StTensor } from "../../io/st_tensor.ts";
import { flattenStateDict, loadTorchFile, TorchTensor } from "../../io/torch_load.ts";
import { unpickle } from "../../io/pickle.ts";
import { readZipDirectory, readZipEntry, type ZipEntry } from "../../io/zip.ts";
import { orderedDictOps, PickleWriter, tensorOps, Tuple } from "./_pickle_writer.ts";
import {
  caseRng,
  headerEnd,
  mutate,
  randomHeaderFile,
  randomPickle,
  Rng,
  textEditedFile,
} from "./_fuzz_inputs.ts";
import { buildTorchZip, buildZip } from "./_zip_writer.ts";

/** The readers under fuzz. */
export type FuzzTarget = "safetensors" | "zip" | "pickle";

/** A broken invariant: the reader misbehaved (as opposed to rejecting the input). */
export class FuzzFailure extends Error {}

/** Fixture bytes the worker receives from the test (workers need no file access). */
export interface FuzzFixtures {
  safetensors: Uint8Array[];
  zips: Uint8Array[];
  legacy: Uint8Array;
}

/** Bases derived once per worker from the fixtures. */
export interface FuzzBases {
  stFiles: Uint8Array[];
  zips: { bytes: Uint8Array; structure: number[] }[];
  pickles: { pickle: Uint8Array; storages: [string, Uint8Array][] }[];
  legacy: Uint8Array;
}

/** Builds the mutation bases: fixture files plus small synthetic ones that reach more branches. */
export function prepareBases(fixtures: FuzzFixtures): FuzzBases {
  const rng = new Rng(12345);
  const small: Uint8Array[] = [];
  for (let f = 0; f < 4; f++) {
    const tensors = new Map<string, StTensor>();
    for (let t = 0; t < 1 + rng.int(4); t++) {
      const dtype = rng.pick(ST_DTYPES);
      const shape = Array.from({ length: rng.int(3) }, () => rng.int(4));
      tensors.set(`t${t}.${rng.pick(["w", "b", "é", "__proto__"])}`, {
        dtype,
        shape,
        data: new Uint8Array(Number(byteSizeOf(dtype, shape))).map(() => rng.int(256)),
      });
    }
    small.push(
      serializeSafetensors(tensors, rng.chance(0.5) ? { epoch: "3", "0": "zero" } : undefined),
    );
  }
  const synthetic = syntheticCheckpoint();
  const zips = [
    ...fixtures.zips,
    synthetic.zip,
    buildZip([{ name: "a/b", data: new Uint8Array(9) }], { zip64: true }),
  ];
  const pickles = [synthetic.entry, ...fixtures.zips.map(extractPickle)];
  return {
    stFiles: [...fixtures.safetensors, ...small],
    zips: zips.map((bytes) => ({ bytes, structure: signatureOffsets(bytes) })),
    pickles,
    legacy: fixtures.legacy,
  };
}

/** A small torch zip with strided, tied and 0-dim tensors, plus an optimizer-like dict. */
function syntheticCheckpoint() {
  const storages: [string, Uint8Array][] = [
    ["0", new Uint8Array(new Float32Array([0, 1, 2, 3, 4, 5]).buffer)],
    ["1", new Uint8Array(new BigInt64Array([7n, -1n]).buffer)],
  ];
  const t = (
    key: string,
    type: string,
    numel: number,
    offset: number,
    size: number[],
    stride: number[],
  ) => tensorOps({ key, storageType: type, numel, offset, size, stride });
  const pickle = new PickleWriter().proto(2).value(
    new Map<unknown, unknown>([
      [
        "model",
        orderedDictOps([
          ["w", t("0", "FloatStorage", 6, 0, [2, 3], [3, 1])],
          ["wt", t("0", "FloatStorage", 6, 0, [3, 2], [1, 3])],
          ["s", t("0", "FloatStorage", 6, 5, [], [])],
          ["ids", t("1", "LongStorage", 2, 0, [2], [1])],
        ]),
      ],
      [
        "opt",
        new Map<unknown, unknown>([[0, new Map([["step", 3]])], [1, [
          new Tuple([0.9, 0.999]),
          null,
          true,
        ]]]),
      ],
    ]),
  ).stop().bytes();
  return { zip: buildTorchZip("synthetic", pickle, storages), entry: { pickle, storages } };
}

function extractPickle(zip: Uint8Array): { pickle: Uint8Array; storages: [string, Uint8Array][] } {
  const entries = readZipDirectory(zip);
  const read = (e: ZipEntry) => readZipEntry(zip, e).slice();
  const pkl = entries.find((e) => e.name.endsWith("/data.pkl"))!;
  const storages = entries.filter((e) => e.name.includes("/data/"))
    .map((e): [string, Uint8Array] => [e.name.slice(e.name.lastIndexOf("/") + 1), read(e)]);
  return { pickle: read(pkl), storages };
}

/** Offsets of zip record signatures ("PK" + 01 02 / 03 04 / 05 06 / 06 06 / 06 07). */
function signatureOffsets(bytes: Uint8Array): number[] {
  const out: number[] = [];
  for (let i = 0; i + 3 < bytes.length; i++) {
    if (bytes[i] === 0x50 && bytes[i + 1] === 0x4b && [1, 3, 5, 6].includes(bytes[i + 2]!)) {
      out.push(i);
    }
  }
  return out;
}

// ---- safetensors ----

/** Accepted files must give in-bounds views that tile the data section and survive a round trip. */
function checkSafetensors(bytes: Uint8Array, rng: Rng): "parsed" | "rejected" {
  let parsed;
  try {
    parsed = parseSafetensors(bytes, "fuzz.safetensors");
  } catch (e) {
    expectPlainError(e, "Invalid safetensors file fuzz.safetensors: ");
    return "rejected";
  }
  const dataStart = headerEnd(bytes);
  const spans: [number, number][] = [];
  for (const [name, t] of parsed.tensors) {
    const begin = t.data.byteOffset - bytes.byteOffset;
    if (
      t.data.buffer !== bytes.buffer || begin < dataStart ||
      begin + t.data.byteLength > bytes.length
    ) {
      throw new FuzzFailure(`tensor "${name}" is not a view inside the data section`);
    }
    if (
      !isStDType(t.dtype) || !t.shape.every(isDim) ||
      BigInt(t.data.byteLength) !== byteSizeOf(t.dtype, t.shape)
    ) {
      throw new FuzzFailure(`tensor "${name}" has inconsistent dtype/shape/bytes`);
    }
    spans.push([begin, begin + t.data.byteLength]);
  }
  spans.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let at = dataStart;
  for (const [b, e] of spans) {
    if (b !== at) {
      throw new FuzzFailure(`tensors do not tile the data section (span at ${b}, expected ${at})`);
    }
    at = e;
  }
  if (at !== bytes.length) throw new FuzzFailure(`tensors end at ${at}, file at ${bytes.length}`);
  if (Object.values(parsed.metadata).some((v) => typeof v !== "string")) {
    throw new FuzzFailure("non-string metadata");
  }
  if (rng.chance(0.3)) {
    // What was accepted must survive a round trip.
    const again = parseSafetensors(serializeSafetensors(parsed.tensors, parsed.metadata));
    for (const [name, t] of parsed.tensors) {
      const u = again.tensors.get(name);
      if (
        !u || u.dtype !== t.dtype || u.shape.join() !== t.shape.join() ||
        !u.data.every((x, i) => x === t.data[i])
      ) {
        throw new FuzzFailure(`tensor "${name}" changed in a round trip`);
      }
    }
  }
  return "parsed";
}

// ---- zip ----

/** Accepted entries must be views of exactly their size inside the archive; the loader must behave too. */
function checkZip(bytes: Uint8Array): "parsed" | "rejected" {
  let outcome: "parsed" | "rejected" = "parsed";
  try {
    for (const entry of readZipDirectory(bytes, "fuzz.pt")) {
      let data: Uint8Array;
      try {
        data = readZipEntry(bytes, entry, { source: "fuzz.pt" });
      } catch (e) {
        expectPlainError(e, "fuzz.pt");
        outcome = "rejected";
        continue;
      }
      const at = data.byteOffset - bytes.byteOffset;
      if (
        data.buffer !== bytes.buffer || at < 0 || at + data.length > bytes.length ||
        data.length !== entry.size
      ) {
        throw new FuzzFailure(
          `entry "${entry.name}" is not a view of ${entry.size} bytes inside the archive`,
        );
      }
    }
  } catch (e) {
    if (e instanceof FuzzFailure) throw e;
    expectPlainError(e, "Invalid zip archive fuzz.pt: ");
    outcome = "rejected";
  }
  checkTorchLoad(bytes);
  return outcome;
}

// ---- pickle (through loadTorchFile, so persistent ids and tensors are real) ----

/** The loader's contract: a value whose tensors are consistent, or a plain Error naming the file. */
function checkTorchLoad(bytes: Uint8Array): "parsed" | "rejected" {
  let value: unknown;
  try {
    value = loadTorchFile(bytes, "fuzz.pt");
  } catch (e) {
    expectPlainError(e, "fuzz.pt");
    return "rejected";
  }
  walkValue(value);
  if (value instanceof Map) {
    try {
      flattenStateDict(value);
    } catch (e) {
      if (!(e instanceof Error) || (e.constructor !== Error && e.constructor !== TypeError)) {
        throw new FuzzFailure(`flattenStateDict() threw ${describeThrown(e)}`);
      }
    }
  }
  return "parsed";
}

/** Visits every reachable value iteratively (pickles can nest deeper than the JS stack) and checks tensors. */
function walkValue(root: unknown): void {
  const seen = new Set<unknown>();
  const todo = [root];
  while (todo.length > 0) {
    const v = todo.pop();
    if (typeof v !== "object" || v === null || seen.has(v)) continue;
    seen.add(v);
    if (v instanceof TorchTensor) {
      if (
        !isStDType(v.dtype) || !v.shape.every(isDim) ||
        BigInt(v.data.byteLength) !== byteSizeOf(v.dtype, v.shape)
      ) {
        throw new FuzzFailure(
          `a loaded tensor has inconsistent dtype ${v.dtype}, shape [${v.shape}], ${v.data.byteLength} bytes`,
        );
      }
    } else if (Array.isArray(v)) {
      todo.push(...v);
    } else if (v instanceof Map) {
      for (const [k, x] of v) todo.push(k, x);
    }
  }
}

function describeThrown(e: unknown): string {
  return e instanceof Error
    ? `${e.constructor.name}: ${e.message}\n${e.stack}`
    : `a non-Error value ${String(e)}`;
}

function expectPlainError(e: unknown, needle: string): void {
  if (!(e instanceof Error) || e.constructor !== Error) {
    throw new FuzzFailure(`expected a plain Error, got ${describeThrown(e)}`);
  }
  if (!e.message.includes(needle)) {
    throw new FuzzFailure(`error message lacks "${needle}": ${e.message}`);
  }
}

/** Runs case `index` of `target`; returns whether the input was accepted, throws FuzzFailure on misbehaviour. */
export function runCase(
  target: FuzzTarget,
  bases: FuzzBases,
  seed: number,
  index: number,
): "parsed" | "rejected" {
  const rng = caseRng(seed, index);
  if (target === "safetensors") {
    const kind = rng.int(10);
    const base = rng.pick(bases.stFiles);
    const input = kind < 4
      ? mutate(rng, base, 0, headerEnd(base) + 16)
      : kind < 7
      ? randomHeaderFile(rng)
      : textEditedFile(rng, base);
    return checkSafetensors(input, rng);
  }
  if (target === "zip") {
    const { bytes, structure } = rng.pick(bases.zips);
    const at = structure.length > 0 && rng.chance(0.8)
      ? rng.pick(structure)
      : rng.int(bytes.length);
    return checkZip(mutate(rng, bytes, at, at + 64));
  }
  const kind = rng.int(10);
  if (kind < 3) return checkTorchLoad(mutate(rng, bases.legacy, 0, 800));
  const base = rng.pick(bases.pickles);
  const stream = kind < 7 ? mutate(rng, base.pickle) : randomPickle(rng);
  try {
    unpickle(stream, { source: "fuzz.pkl", findGlobal: () => null }); // the bare VM, every name resolving to None
  } catch (e) {
    expectPlainError(e, "fuzz.pkl");
  }
  const storages = kind < 7 ? base.storages : syntheticStorages;
  return checkTorchLoad(buildTorchZip("fuzz", stream, storages));
}

const syntheticStorages: [string, Uint8Array][] = [
  ["0", new Uint8Array(new Float32Array([0, 1, 2, 3, 4, 5]).buffer)],
  ["1", new Uint8Array(new BigInt64Array([7n, -1n]).buffer)],
];
