/**
 * Reads F32 tensors from the PyTorch reference fixtures for the kernel tests:
 * the repository's `fixtures/pytorch`, or the folder in DTRAIN_FIXTURES.
 * A minimal safetensors reader, so these tests do not depend on io/.
 */
import { fileURLToPath } from "node:url";

/** The fixture folder. */
export function fixtureDir(): string {
  const override = Deno.env.get("DTRAIN_FIXTURES");
  if (override) return override.replace(/\/+$/, "");
  return fileURLToPath(new URL("../../fixtures/pytorch", import.meta.url));
}

/** Every F32 tensor of a safetensors fixture, by name, as a copy. */
export function readF32Tensors(name: string): Map<string, Float32Array<ArrayBuffer>> {
  const path = `${fixtureDir()}/${name}`;
  const bytes = Deno.readFileSync(path);
  const headerLen = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLen))) as Record<
    string,
    { dtype: string; data_offsets: [number, number] }
  >;
  const out = new Map<string, Float32Array<ArrayBuffer>>();
  for (const [key, info] of Object.entries(header)) {
    if (key === "__metadata__" || info.dtype !== "F32") continue;
    const [begin, end] = info.data_offsets;
    const data = bytes.slice(8 + headerLen + begin, 8 + headerLen + end);
    out.set(key, new Float32Array(data.buffer));
  }
  if (out.size === 0) throw new Error(`Fixture ${path} holds no F32 tensors`);
  return out;
}
