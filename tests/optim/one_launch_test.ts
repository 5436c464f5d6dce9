/**
 * AdamW and SGD step every parameter of a device in one native call
 * (dt_adamw_many, dt_sgd_many: one kernel launch on a GPU) with each group's
 * hyperparameters and each parameter's own step, and give the bits of torch's
 * single-tensor loop, i.e. of one dt_adamw / dt_sgd per parameter: on the CPU
 * and on the emulated GPU (in a process of its own).
 */
import assert from "node:assert/strict";
import { HAVE_EMU, lastJsonOf } from "../gpu/_emu.ts";
import { K, n64, ok, ptr } from "../kernels/_helpers.ts";
import {
  ADAMW_GROUP_OF,
  ADAMW_GROUPS,
  gradient,
  runSteps,
  SGD_GROUP_OF,
  SGD_GROUPS,
  SIZES,
  STEPS,
  values,
  zeroGradCalls,
} from "./scripts/optim_steps.ts";

/** The parameters after STEPS steps of one dt_adamw per parameter and step (its own step count). */
function adamwReference(): Uint8Array[] {
  return SIZES.map((n, t) => {
    const h = ADAMW_GROUPS[ADAMW_GROUP_OF[t]!]!;
    const p = values(n, t + 1), m = new Float32Array(n), v = new Float32Array(n);
    let count = 0;
    for (let step = 0; step < STEPS; step++) {
      const g = gradient(t, step);
      if (!g) continue;
      count++;
      ok(
        K.dt_adamw(
          ptr(p),
          ptr(g),
          ptr(m),
          ptr(v),
          n64(n),
          h.lr,
          h.betas[0],
          h.betas[1],
          h.eps,
          h.weightDecay,
          n64(count),
          null,
        ),
      );
    }
    return new Uint8Array(p.buffer);
  });
}

/** The same with one dt_sgd per parameter and step (a buffer from the first step with a gradient). */
function sgdReference(): Uint8Array[] {
  return SIZES.map((n, t) => {
    const h = SGD_GROUPS[SGD_GROUP_OF[t]!]!;
    const p = values(n, t + 1), buf = new Float32Array(n);
    let first = true;
    for (let step = 0; step < STEPS; step++) {
      const g = gradient(t, step);
      if (!g) continue;
      ok(
        K.dt_sgd(
          ptr(p),
          ptr(g),
          h.momentum === 0 ? null : ptr(buf),
          n64(n),
          h.lr,
          h.momentum,
          h.dampening,
          h.weightDecay,
          h.nesterov ? 1 : 0,
          first ? 1 : 0,
          null,
        ),
      );
      first = false;
    }
    return new Uint8Array(p.buffer);
  });
}

function assertSameParams(got: ArrayLike<number>[], want: Uint8Array[], what: string): void {
  assert.equal(got.length, want.length);
  want.forEach((w, t) => {
    const g = Uint8Array.from(got[t]!);
    assert.equal(g.length, w.length, `${what}: parameter ${t} size`);
    const at = w.findIndex((b, i) => b !== g[i]);
    assert.equal(at, -1, `${what}: parameter ${t} (${SIZES[t]} elements) differs at byte ${at}`);
  });
}

const ONE_ADAMW = { dt_adamw: 0, dt_adamw_many: 1, dt_sgd: 0, dt_sgd_many: 0 };
const ONE_SGD = { dt_adamw: 0, dt_adamw_many: 0, dt_sgd: 0, dt_sgd_many: 1 };

Deno.test("AdamW steps every parameter in one native call, with the bits of one dt_adamw per parameter", () => {
  const r = runSteps("adamw");
  assert.deepEqual(r.calls, Array(STEPS).fill(ONE_ADAMW));
  assertSameParams(r.params, adamwReference(), "AdamW");
});

Deno.test("SGD steps every parameter in one native call, with the bits of one dt_sgd per parameter", () => {
  const r = runSteps("sgd");
  assert.deepEqual(r.calls, Array(STEPS).fill(ONE_SGD));
  assertSameParams(r.params, sgdReference(), "SGD");
});

Deno.test({
  name: "on the emulated GPU AdamW and SGD take one launch per step and give the CPU's bits",
  ignore: !HAVE_EMU,
  async fn() {
    const out = await lastJsonOf("tests/optim/scripts/optim_steps.ts", "cuda-emu");
    assert.deepEqual(out.adamw.calls, Array(STEPS).fill(ONE_ADAMW));
    assert.deepEqual(out.sgd.calls, Array(STEPS).fill(ONE_SGD));
    assertSameParams(out.adamw.params, adamwReference(), "AdamW on cuda-emu");
    assertSameParams(out.sgd.params, sgdReference(), "SGD on cuda-emu");
  },
});

Deno.test("zeroGrad zeroes every f32 gradient in one native call", () => {
  const r = runSteps("adamw");
  assert.equal(r.params.length, SIZES.length);
  const z = zeroGradCalls();
  assert.deepEqual(z.calls, { dt_zero_many: 1, dt_fill: 0 });
  assert.ok(z.grads.every((g) => g.every((v) => v === 0)), "a gradient is not zero");
  assert.equal(z.grads.length, SIZES.length);
});

Deno.test("a parameter the one-call step cannot update is refused by name, before any update", async () => {
  const { AdamW } = await import("../../optim/adamw.ts");
  const { castTensor, fromArray } = await import("../../tensor/tensor.ts");
  const ok = fromArray(Float32Array.of(1, 2), [2]);
  const low = castTensor(fromArray(Float32Array.of(1, 2, 3), [3]), "bf16");
  for (const p of [ok, low]) {
    p.requiresGrad = true;
    p.grad = fromArray(Float32Array.of(1, 1, 1).subarray(0, p.numel), [p.numel]);
  }
  const opt = new AdamW([ok, low]);
  assert.throws(
    () => opt.step(),
    /AdamW\.step: parameter 1 \[3\] has dtype bf16; the optimizer updates f32 tensors/,
  );
  assert.deepEqual([...(ok.toArray() as Float32Array)], [1, 2], "the f32 parameter was updated");
  assert.equal(opt.stateDict().tensors.get("0.step")?.item(), 0, "the step advanced");
});
