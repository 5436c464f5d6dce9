/**
 * Test helpers for the PyTorch reference fixtures: where the folder is
 * (DTRAIN_FIXTURES, else the repository's fixtures/pytorch) and a tiny
 * safetensors reader (F32 and I64 only), kept local so these tests do not
 * depend on io/safetensors.ts.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The fixture folder: $DTRAIN_FIXTURES, or the repository's fixtures/pytorch. */
export function fixturesDir(): string {
  const override = Deno.env.get("DTRAIN_FIXTURES");
  if (override) return override;
  return fileURLToPath(new URL("../../fixtures/pytorch", import.meta.url));
}

/** Reads and parses a JSON fixture by file name. */
export function readJsonFixture<T>(name: string): T {
  return JSON.parse(Deno.readTextFileSync(join(fixturesDir(), name))) as T;
}

/** One tensor of a safetensors file: its dtype, shape and a typed view of its data. */
export interface FixtureTensor {
  dtype: "F32" | "I64";
  shape: number[];
  data: Float32Array | BigInt64Array;
}

/** Reads every tensor of a safetensors fixture (8-byte LE header length, JSON, data). */
export function readSafetensorsFixture(
  name: string,
): Map<string, FixtureTensor> {
  const bytes = Deno.readFileSync(join(fixturesDir(), name));
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = Number(view.getBigUint64(0, true));
  const header = JSON.parse(
    new TextDecoder().decode(bytes.subarray(8, 8 + headerLength)),
  ) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const dataStart = 8 + headerLength;
  const tensors = new Map<string, FixtureTensor>();
  for (const [key, entry] of Object.entries(header)) {
    if (key === "__metadata__") continue;
    const [begin, end] = entry.data_offsets;
    // Copy so the typed array is aligned whatever the file layout.
    const raw = bytes.slice(dataStart + begin, dataStart + end).buffer;
    if (entry.dtype === "F32") {
      tensors.set(key, {
        dtype: "F32",
        shape: entry.shape,
        data: new Float32Array(raw),
      });
    } else if (entry.dtype === "I64") {
      tensors.set(key, {
        dtype: "I64",
        shape: entry.shape,
        data: new BigInt64Array(raw),
      });
    } else {
      throw new TypeError(
        `Fixture ${name}: tensor ${key} has dtype ${entry.dtype}, expected F32 or I64`,
      );
    }
  }
  return tensors;
}

/** The float32 data of tensor `key` in `tensors`, or an error naming what is missing. */
export function f32Tensor(
  tensors: Map<string, FixtureTensor>,
  key: string,
): Float32Array {
  const t = tensors.get(key);
  if (!t || !(t.data instanceof Float32Array)) {
    throw new TypeError(`Fixture tensor ${key} is missing or not F32`);
  }
  return t.data;
}

/** Counts positions where two float32 arrays differ bitwise; reports the first few. */
export function bitDiff(
  actual: Float32Array,
  expected: Float32Array,
): { mismatches: number; maxAbs: number; first: string[] } {
  if (actual.length !== expected.length) {
    return {
      mismatches: Math.max(actual.length, expected.length),
      maxAbs: Infinity,
      first: [`length ${actual.length} != ${expected.length}`],
    };
  }
  const a = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
  const b = new Uint32Array(
    expected.buffer,
    expected.byteOffset,
    expected.length,
  );
  let mismatches = 0;
  let maxAbs = 0;
  const first: string[] = [];
  for (let i = 0; i < a.length; i++) {
    if (a[i] === b[i]) continue;
    mismatches++;
    maxAbs = Math.max(maxAbs, Math.abs(actual[i]! - expected[i]!));
    if (first.length < 5) first.push(`[${i}] ${actual[i]} != ${expected[i]}`);
  }
  return { mismatches, maxAbs, first };
}
