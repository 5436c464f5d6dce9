/**
 * The op sweep's derived bounds for reductions, rows and updates
 * (scripts/gpu_check/op_bounds.ts), through the sweep's own harness (runCase)
 * with the CPU library standing in for the GPU one: every case passes as
 * computed and with every result moved by an ulp (what another rounding or
 * an FMA does), and fails with a planted kernel error: one element taken from
 * its neighbour (an off-by-one index) or every result scaled by 1 + 2^-10
 * (a wrong constant). The bounds are also checked against their formulas.
 */
import assert from "node:assert/strict";
import {
  type Arr,
  asNumbers,
  type Case,
  type Kind,
  Rng,
  runCase,
  toBf16,
  toF16,
} from "../../scripts/gpu_check/_harness.ts";
import { openLibrary } from "../../ffi/native.ts";
import { KERNEL_SYMBOLS } from "../../ffi/symbols.ts";
import { buildOpCases, EMULATED_SIZES } from "../../scripts/gpu_check/op_cases.ts";
import {
  axpyBounds,
  crossEntropyFwdBounds,
  geluFwdBounds,
  reduceBcastBounds,
  relativeTo,
  softmaxFwdRelative,
  sumsqBounds,
} from "../../scripts/gpu_check/op_bounds.ts";
import { gamma, sumBound } from "../../scripts/gpu_check/tolerance.ts";
import { layerNormFwdBounds } from "../../scripts/gpu_check/op_bounds_layernorm.ts";

const cpu = openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS);

/** The ops whose bounds op_bounds.ts derives. */
const DERIVED =
  /^(axpy|reduce_bcast|sumsq|clip_grad_norm|softmax (fwd|bwd)|adamw|sgd|gemm_ex (g W|dW|x W\^T)|conv2d_direct (fwd|bwd input)|crossentropy (fwd|bwd)|attention (fwd|bwd)|gelu (fwd|bwd)|gelu_ex (fwd|bwd)|layernorm (fwd|bwd)|unary (exp|log|sigmoid|tanh|pow))/;
const cases = buildOpCases({ rng: new Rng(11), cpu, sizes: EMULATED_SIZES })
  .filter((c) => DERIVED.test(c.op) && c.bounds)
  .filter((c) => outputsOf(c).some(([, a]) => a.length > 0));

/** The case's compared buffers, in the order runCase allocates them after the inputs. */
function outputsOf(c: Case): [string, Arr, Kind][] {
  return [
    ...Object.entries(c.outputs ?? {}),
    ...Object.entries(c.inout ?? {}),
  ].map(([n, [a, kind]]) => [n, a, kind]);
}

/**
 * A compared output as the plants see it: its values, its bits when it is bf16/f16, and which
 * elements have a bound of 0 (around an offset run: the kernel must leave them untouched).
 */
interface Planted {
  values: Float32Array | Float64Array;
  bits16: Uint16Array | null;
  untouched: (i: number) => boolean;
}

/**
 * Runs `c` with the CPU library as the "GPU", then `plant` changes the results the GPU side left
 * in its (host) buffers before they are compared: a kernel that computed them so. bf16/f16
 * outputs are given decoded; a changed value is rounded back into its format.
 */
function runPlanted(c: Case, plant: (out: Planted) => void) {
  const allocs: Deno.PointerObject[] = [];
  const symbols = {
    ...cpu.symbols,
    dt_alloc: (bytes: bigint) => {
      const p = cpu.symbols.dt_alloc(bytes)!;
      allocs.push(p);
      return p;
    },
  };
  const gpu = { ...cpu, symbols } as typeof cpu;
  const inputs = Object.keys(c.inputs ?? {}).length;
  // the names it bounds, from references of the outputs' sizes (zeros: only the names are read)
  const zeros = (name: string): Arr => {
    const a = outputsOf(c).find(([n]) => n === name)![1];
    return new (a.constructor as new (n: number) => Arr)(a.length);
  };
  const probe = c.bounds!(zeros), bounded = new Set(Object.keys(probe));
  return runCase(c, { cpu, gpu, stream: null }, (call) => {
    const st = call();
    outputsOf(c).forEach(([name, a, kind], i) => {
      if (!bounded.has(name) || a.length === 0) return;
      const buf = Deno.UnsafePointerView.getArrayBuffer(allocs[inputs + i]!, a.byteLength);
      const untouched = (j: number) => probe[name]![j] === 0;
      if (kind !== "bf16" && kind !== "f16") {
        plant({
          values: kind === "f64" ? new Float64Array(buf) : new Float32Array(buf),
          bits16: null,
          untouched,
        });
        return;
      }
      const bits16 = new Uint16Array(buf);
      const before = Float32Array.from(asNumbers(bits16, kind));
      const values = before.slice();
      plant({ values, bits16, untouched });
      const encode = kind === "bf16" ? toBf16 : toF16;
      values.forEach((v, j) => {
        if (!Object.is(v, before[j])) bits16[j] = encode(Float32Array.of(v))[0]!;
      });
    });
    return st;
  });
}

/** Every finite nonzero result the kernel writes moved by one ulp of its format away from zero. */
function ulpUp({ values: v, bits16, untouched }: Planted): void {
  const bits = bits16 ??
    (v instanceof Float32Array
      ? new Uint32Array(v.buffer, v.byteOffset, v.length)
      : new BigUint64Array(v.buffer, v.byteOffset, v.length));
  for (let i = 0; i < v.length; i++) {
    if (!Number.isFinite(v[i]!) || v[i] === 0 || untouched(i)) continue;
    if (bits instanceof BigUint64Array) bits[i]!++;
    else bits[i]!++;
  }
}

Deno.test("derived bounds: every case of reductions, rows and updates is among them", () => {
  const ops = new Set(cases.map((c) => c.op.split(" ")[0]));
  for (
    const op of [
      "axpy",
      "reduce_bcast",
      "sumsq",
      "sumsq_many",
      "clip_grad_norm",
      "softmax",
      "adamw",
      "adamw_many",
      "sgd",
      "sgd_many",
      "gemm_ex",
      "conv2d_direct",
      "crossentropy",
      "attention",
      "gelu",
      "gelu_ex",
      "layernorm",
      "unary",
    ]
  ) {
    assert.ok(ops.has(op), `no derived case of ${op}: ${[...ops]}`);
  }
});

Deno.test("derived bounds: each case passes as the CPU computes it and with every result an ulp off", () => {
  for (const c of cases) {
    const honest = runCase(c, { cpu, gpu: cpu, stream: null });
    assert.ok(honest.ok, `${c.op} ${c.size}: ${honest.detail}`);
    const r = runPlanted(c, ulpUp);
    assert.ok(r.ok, `${c.op} ${c.size} (an ulp off): ${r.detail}`);
  }
});

Deno.test("derived bounds: an off-by-one element or a scale off by 2^-10 fails every case", () => {
  for (const c of cases) {
    let finite = false;
    const shifted = runPlanted(c, ({ values: v }) => {
      finite ||= v.some(Number.isFinite);
      // the element of largest magnitude takes its neighbour's value (a one-element result, or
      // one equal to its neighbour: a plainly wrong value)
      let at = 0;
      for (let i = 0; i < v.length; i++) if (Math.abs(v[i]!) > Math.abs(v[at]!)) at = i;
      const other = at + 1 < v.length ? at + 1 : at - 1;
      v[at] = other >= 0 && v[other] !== v[at] ? v[other]! : v[at]! * 2 + 1;
    });
    if (!finite) continue; // NaN on both sides (a mean over no valid row): nothing to move
    assert.ok(!shifted.ok, `${c.op} ${c.size}: an off-by-one element passed`);
    // 2^-10 is below one ulp of bf16 (2^-7) and invisible once rounded: 16-bit results are scaled
    // by 2^-5 (4 bf16 ulps, 32 of f16)
    let changed = false, sixteen = false; // results that are all zeros do not change with a scale
    const scaled = runPlanted(c, ({ values: v, bits16 }) => {
      sixteen ||= bits16 !== null;
      const scale = 1 + (bits16 ? 2 ** -5 : 2 ** -10);
      for (let i = 0; i < v.length; i++) {
        changed ||= v[i] !== 0;
        v[i] = v[i]! * scale;
      }
    });
    if (!changed) continue;
    assert.ok(
      !scaled.ok,
      `${c.op} ${c.dtype} ${c.size}: a scale off by ${sixteen ? "2^-5" : "2^-10"} passed`,
    );
  }
});

Deno.test("derived bounds follow from their formulas", () => {
  // axpy: 2γ_2 of |alpha·x| + |y|
  const x = Float32Array.of(1, -2), y = Float32Array.of(3, 0);
  const ax = axpyBounds(x, y, 0.5);
  assert.ok(Math.abs(ax[0]! - 2 * gamma(2, "f32") * 3.5) < 1e-20);
  // reduce_bcast: runs of `inner` taken modulo bn; each output's own sum of |terms|, in double
  const a = Float32Array.of(1, -1, 2, -2, 3, -3, 4, -4); // [outer 2, bn 2, inner 2]
  const rb = reduceBcastBounds(a, 2, 2);
  assert.equal(rb.length, 2);
  assert.ok(Math.abs(rb[0]! - sumBound(4, 1 + 1 + 3 + 3, "f64", "f32")) < 1e-20);
  assert.ok(Math.abs(rb[1]! - sumBound(4, 2 + 2 + 4 + 4, "f64", "f32")) < 1e-20);
  // sums of squares: one per tensor, relative to Σx²
  const ss = sumsqBounds([Float32Array.of(3, 4), new Float32Array(0)]);
  assert.ok(Math.abs(ss[0]! - sumBound(2, 25, "f64")) < 1e-20);
  // softmax: more roundings' worth for larger arguments of exp
  assert.ok(
    softmaxFwdRelative(Float32Array.of(80), 4, 0.125) >
      softmaxFwdRelative(Float32Array.of(8), 4, 0.125),
  );
  assert.ok(softmaxFwdRelative(Float32Array.of(8), 4, 0.125) < 1e-5);
  assert.deepEqual([...relativeTo([2, 0], 0.5)].map((v) => v > 0), [true, true]);
  // GELU: nothing to round at 0; below −3 the bound stays absolute (t's rounding near −1), far
  // above |y|; an f16 result adds its subnormal step
  const [g0, gNeg, gPos] = geluFwdBounds([0, -5, 5], "f32");
  assert.ok(g0! < 1e-37);
  assert.ok(gNeg! > 0.5 * 5 * (1 + Math.tanh(-0.79788 * (5 + 0.044715 * 125))) && gNeg! < gPos!);
  assert.ok(geluFwdBounds([0], "f16")[0]! >= 2 ** -24);
  // cross-entropy: an ignored row's lse is bounded, its loss is not counted; no valid row, no bound
  const ce = crossEntropyFwdBounds(
    [1, 2, 3, 4],
    Int32Array.of(-100, -100),
    [3.3, 4.3],
    [2, 2],
    -100,
  );
  assert.equal(ce.lse.length, 2);
  assert.ok(ce.lse[0]! > 0);
  assert.equal(ce.loss[0], 0);
  // layer norm: the mean within 2γ_{C+2} of Σ|x|/C
  const ln = layerNormFwdBounds(Float32Array.of(1, -3), null, null, [-1], [0.5], [1, 2]);
  assert.ok(Math.abs(ln.mean[0]! - 2 * gamma(4, "f32") * 2) < 1e-20);
});
