/**
 * Checkpoint content that is a pure function of (step, variant, scale), so a
 * test, a killed child process and the kill-test script all know what a
 * given step must hold; plus the assertion that a loaded checkpoint holds it.
 */
import assert from "node:assert/strict";
import type { StDType, StTensor } from "../../../io/safetensors.ts";
import type { CheckpointPayload, LoadedCheckpoint } from "../../../train/checkpoint/manager.ts";

/** Knobs of payloadForStep(). */
export interface PayloadOptions {
  /** Distinguishes two saves of the same step (default 0). */
  variant?: number;
  /** Multiplies the tensor sizes (default 1: a few KiB). */
  scale?: number;
}

/** An StTensor over the bytes of `values` (no copy). */
export function tensor(dtype: StDType, shape: number[], values: ArrayBufferView): StTensor {
  return {
    dtype,
    shape,
    data: new Uint8Array(values.buffer, values.byteOffset, values.byteLength),
  };
}

/** A small deterministic generator (mulberry32) for the tensor values. */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The checkpoint a trainer would save at `step`: model and optimizer tensor
 * files (F32, BF16 and I64, sizes growing with the step) and a state holding
 * every field the engine stores. Same arguments, same bytes.
 */
export function payloadForStep(step: number, opts: PayloadOptions = {}): CheckpointPayload {
  const variant = opts.variant ?? 0;
  const scale = opts.scale ?? 1;
  const rows = (4 + (step % 16) * 4) * scale; // grows with the step, so a truncated file differs in size
  const next = generator(step * 7919 + variant * 104729 + scale);
  const floats = (n: number) => Float32Array.from({ length: n }, () => next() * 2 - 1);
  const bf16 = Uint16Array.from({ length: rows }, () => Math.floor(next() * 0x7f00));
  const model = new Map([
    ["embed.weight", tensor("F32", [rows, 16], floats(rows * 16))],
    ["head.bias", tensor("F32", [rows], floats(rows))],
    ["head.gain", tensor("BF16", [rows], bf16)],
  ]);
  const optimizer = new Map([
    ["exp_avg.embed.weight", tensor("F32", [rows, 16], floats(rows * 16))],
    ["exp_avg_sq.embed.weight", tensor("F32", [rows, 16], floats(rows * 16))],
    ["step", tensor("I64", [1], new BigInt64Array([BigInt(step)]))],
  ]);
  return {
    step,
    files: [
      { name: "model", tensors: model, metadata: { format: "pt", step: String(step) } },
      { name: "optimizer", tensors: optimizer },
    ],
    state: {
      epoch: Math.floor(step / 10),
      step,
      variant,
      data_position: { epoch: Math.floor(step / 10), batch_index: step % 10 },
      rng: [0, 1].map((rank) => ({ rank, seed: String(1234 + rank), offset: step * 64 + rank })),
      scaler: { scale: 65536 / 2 ** (step % 3), growth_tracker: step % 7 },
      schedule: { lr: 0.001 * (1 - step / 1000), last_step: step },
      config: { model: "toy", batch_size: 8, lr: 0.001, note: "ünïcode ✓" },
      world_size: 2,
      run_id: "checkpoint-test",
    },
  };
}

/** Asserts that `loaded` holds exactly what `expected` saved: every tensor's dtype, shape and bytes, metadata and state. */
export function assertHoldsPayload(loaded: LoadedCheckpoint, expected: CheckpointPayload): void {
  const where = `checkpoint ${loaded.dir}`;
  assert.equal(loaded.step, expected.step, `${where}: step`);
  assert.deepEqual(
    [...loaded.files.keys()].sort(),
    expected.files.map((f) => f.name).sort(),
    `${where}: files`,
  );
  for (const file of expected.files) {
    const got = loaded.files.get(file.name)!;
    assert.deepEqual(got.metadata, file.metadata ?? {}, `${where}: ${file.name} metadata`);
    assert.deepEqual(
      [...got.tensors.keys()].sort(),
      [...file.tensors.keys()].sort(),
      `${where}: ${file.name} tensor names`,
    );
    for (const [name, want] of file.tensors) {
      const t = got.tensors.get(name)!;
      assert.equal(t.dtype, want.dtype, `${where}: ${file.name}/${name} dtype`);
      assert.deepEqual(t.shape, want.shape, `${where}: ${file.name}/${name} shape`);
      assert.ok(sameBytes(t.data, want.data), `${where}: ${file.name}/${name} bytes differ`);
    }
  }
  assert.deepEqual(loaded.state, expected.state, `${where}: state`);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
