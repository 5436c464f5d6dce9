/**
 * Reading a PyTorch fixture folder (the format of fixtures/pytorch):
 * where it is, its JSON records and its safetensors files as host arrays or
 * dtrain tensors.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseSafetensors, type StTensor } from "../io/safetensors.ts";
import type { Tensor } from "../tensor/tensor.ts";
import { fromStTensor } from "../tensor/st_bridge.ts";
import type { StateTensor } from "../nn/module.ts";
import { stateTensor } from "../nn/load.ts";

/**
 * The default fixture folder: DTRAIN_FIXTURES (another set made by
 * scripts/peers/pytorch_fixtures.py), else the repository's fixtures/pytorch.
 */
export function defaultFixtureDir(): string {
  return Deno.env.get("DTRAIN_FIXTURES") ??
    fileURLToPath(new URL("../fixtures/pytorch", import.meta.url));
}

/**
 * The folder of the fixtures kept in this repository (fixtures/: the ops,
 * CNN and SyncBatchNorm references), or DTRAIN_OPS_FIXTURES.
 */
export function repoFixtureDir(): string {
  return Deno.env.get("DTRAIN_OPS_FIXTURES") ??
    fileURLToPath(new URL("../fixtures", import.meta.url));
}

/** A fixture folder's files. */
export class FixtureDir {
  constructor(readonly dir: string) {}

  has(name: string): boolean {
    try {
      return Deno.statSync(join(this.dir, name)).isFile;
    } catch {
      return false;
    }
  }

  // deno-lint-ignore no-explicit-any
  json(name: string): any {
    return JSON.parse(Deno.readTextFileSync(join(this.dir, name)));
  }

  /** Every tensor of a safetensors file. */
  tensors(name: string): Map<string, StTensor> {
    return parseSafetensors(Deno.readFileSync(join(this.dir, name)), name)
      .tensors;
  }

  /** One tensor of a safetensors file as a Float32Array (F32 only). */
  f32(file: string, key: string): Float32Array {
    const t = this.tensors(file).get(key);
    if (!t) throw new Error(`${file} has no tensor "${key}"`);
    return toFloat32(t, `${file}:${key}`);
  }
}

/** The elements of an F32 tensor (copied so the result is aligned). */
export function toFloat32(t: StTensor, what: string): Float32Array {
  if (t.dtype !== "F32") {
    throw new Error(`${what}: expected F32, got ${t.dtype}`);
  }
  return new Float32Array(t.data.slice().buffer);
}

/** All of a file's tensors as state-dict sources for Module.loadStateDict. */
export function stateSources(m: Map<string, StTensor>): Map<string, StateTensor> {
  return new Map([...m].map(([k, v]) => [k, stateTensor(v)]));
}

/** A fixture tensor copied into a dtrain tensor (F32, I64, I32, …). */
export function toTensor(t: StTensor): Tensor {
  return fromStTensor(t);
}
