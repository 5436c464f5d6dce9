/**
 * Tests of the optimizer kernels (dt_adamw, dt_sgd) and dt_unscale_check.
 * The references replay torch 1.13's single-tensor code operation by
 * operation (float32 tensor ops, float64 Python scalars, FMA where torch's
 * AVX2 kernels fuse), so the kernels must match them bit for bit; AdamW is
 * also checked against PyTorch's own first step of the toy MLP.
 */
import assert from "node:assert/strict";
import { fmaf32 } from "../../random/float32_fma.ts";
import { readF32Tensors } from "./_fixtures.ts";
import { assertSameBits, failsWith, K, n64, ok, ptr, Rng, withThreads } from "./_helpers.ts";

const f = Math.fround;

interface AdamW {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  wd: number;
}

/** One torch 1.13 AdamW step on float32 arrays, in place. */
function adamwRef(
  p: Float32Array,
  g: Float32Array,
  m: Float32Array,
  v: Float32Array,
  h: AdamW,
  step: number,
): void {
  const decay = f(1 - h.lr * h.wd);
  const bc1 = 1 - h.beta1 ** step, bc2 = 1 - h.beta2 ** step; // float64, as Python
  const bc2Sqrt = f(Math.sqrt(bc2)), stepSize = f(-(h.lr / bc1));
  const [b1, omb1, b2, omb2, eps] = [
    f(h.beta1),
    f(1 - h.beta1),
    f(h.beta2),
    f(1 - h.beta2),
    f(h.eps),
  ];
  for (let i = 0; i < p.length; i++) {
    const pd = f(p[i]! * decay); //                                   p.mul_(1 - lr*wd)
    m[i] = fmaf32(g[i]!, omb1, f(m[i]! * b1)); //                     m.mul_(b1).add_(g, alpha=1-b1)
    v[i] = fmaf32(f(omb2 * g[i]!), g[i]!, f(v[i]! * b2)); //          v.mul_(b2).addcmul_(g, g, value=1-b2)
    const denom = f(f(f(Math.sqrt(v[i]!)) / bc2Sqrt) + eps); //       (v.sqrt() / sqrt(bc2)).add_(eps)
    p[i] = f(pd + f(f(stepSize * m[i]!) / denom)); //                 p.addcdiv_(m, denom, value=-lr/bc1)
  }
}

/** Gradients spanning many magnitudes, including ones comparable to eps. */
function gradients(rng: Rng, n: number): Float32Array<ArrayBuffer> {
  return rng.normals(n).map((x) => x * 10 ** rng.int(-9, 2));
}

Deno.test("dt_adamw() reproduces torch 1.13's AdamW bit for bit over several steps", () => {
  const rng = new Rng(1);
  const settings: AdamW[] = [
    { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, wd: 1e-2 },
    { lr: 3e-4, beta1: 0.8, beta2: 0.95, eps: 1e-6, wd: 0 },
    { lr: 0.1, beta1: 0, beta2: 0.5, eps: 1e-3, wd: 0.5 },
  ];
  for (const h of settings) {
    for (const n of [1, 7, 1000, 100_003]) {
      const p = rng.normals(n), m = new Float32Array(n), v = new Float32Array(n);
      const [pr, mr, vr] = [p.slice(), m.slice(), v.slice()];
      for (let step = 1; step <= 4; step++) {
        const g = gradients(rng, n);
        ok(
          K.dt_adamw(
            ptr(p),
            ptr(g),
            ptr(m),
            ptr(v),
            n64(n),
            h.lr,
            h.beta1,
            h.beta2,
            h.eps,
            h.wd,
            n64(step),
            null,
          ),
        );
        adamwRef(pr, g, mr, vr, h, step);
      }
      const what = `lr=${h.lr} betas=(${h.beta1}, ${h.beta2}) wd=${h.wd} n=${n}`;
      assertSameBits(p, pr, `param ${what}`);
      assertSameBits(m, mr, `exp_avg ${what}`);
      assertSameBits(v, vr, `exp_avg_sq ${what}`);
    }
  }
});

Deno.test("dt_adamw() matches PyTorch's first step of the toy MLP exactly", () => {
  // variant a of fixtures/pytorch/README.md section 3: AdamW(lr=1e-3) defaults
  const init = readF32Tensors("toy_mlp_init.safetensors");
  const grads = readF32Tensors("toy_mlp_a_step1_grads.safetensors");
  const after = readF32Tensors("toy_mlp_a_step1.safetensors");
  for (const [name, p] of init) {
    const g = grads.get(name)!, n = p.length;
    const m = new Float32Array(n), v = new Float32Array(n);
    ok(K.dt_adamw(ptr(p), ptr(g), ptr(m), ptr(v), n64(n), 1e-3, 0.9, 0.999, 1e-8, 1e-2, 1n, null));
    assertSameBits(p, after.get(name)!, `parameter ${name} after step 1`);
  }
});

interface Sgd {
  lr: number;
  momentum: number;
  dampening: number;
  wd: number;
  nesterov: boolean;
}

/** One torch 1.13 SGD step; every add(x, alpha=a) is one FMA in torch's AVX2 kernels. */
function sgdRef(p: Float32Array, g: Float32Array, buf: Float32Array, h: Sgd, first: boolean): void {
  for (let i = 0; i < p.length; i++) {
    let d = h.wd !== 0 ? fmaf32(p[i]!, f(h.wd), g[i]!) : g[i]!; //              g.add(p, alpha=wd)
    if (h.momentum !== 0) {
      buf[i] = first ? d : fmaf32(d, f(1 - h.dampening), f(buf[i]! * f(h.momentum)));
      d = h.nesterov ? fmaf32(buf[i]!, f(h.momentum), d) : buf[i]!;
    }
    p[i] = fmaf32(d, f(-h.lr), p[i]!); //                                      p.add_(d, alpha=-lr)
  }
}

Deno.test("dt_sgd() reproduces torch 1.13's SGD bit for bit in every mode", () => {
  const rng = new Rng(2);
  const settings: Sgd[] = [
    { lr: 0.1, momentum: 0.9, dampening: 0, wd: 1e-4, nesterov: false },
    { lr: 0.05, momentum: 0.9, dampening: 0.1, wd: 1e-2, nesterov: false },
    { lr: 0.01, momentum: 0.5, dampening: 0, wd: 0, nesterov: true },
    { lr: 0.3, momentum: 0, dampening: 0, wd: 0.1, nesterov: false },
  ];
  for (const h of settings) {
    for (const n of [1, 9, 100_003]) {
      const p = rng.normals(n), buf = new Float32Array(n);
      const [pr, br] = [p.slice(), buf.slice()];
      for (let step = 0; step < 3; step++) {
        const g = rng.normals(n);
        // with momentum 0 torch keeps no buffer: the kernel must not need one
        const bufPtr = h.momentum === 0 ? null : ptr(buf);
        ok(
          K.dt_sgd(
            ptr(p),
            ptr(g),
            bufPtr,
            n64(n),
            h.lr,
            h.momentum,
            h.dampening,
            h.wd,
            h.nesterov ? 1 : 0,
            step === 0 ? 1 : 0,
            null,
          ),
        );
        sgdRef(pr, g, br, h, step === 0);
      }
      assertSameBits(p, pr, `param ${JSON.stringify(h)} n=${n}`);
      assertSameBits(buf, br, `momentum buffer ${JSON.stringify(h)} n=${n}`);
    }
  }
});

Deno.test("optimizer kernels give the same bits on 1 and 4 threads", () => {
  const rng = new Rng(3);
  const n = 300_001, p0 = rng.normals(n), g = gradients(rng, n);
  const run = () => {
    const p = p0.slice(),
      m = new Float32Array(n),
      v = new Float32Array(n),
      q = p0.slice(),
      b = new Float32Array(n);
    ok(K.dt_adamw(ptr(p), ptr(g), ptr(m), ptr(v), n64(n), 1e-3, 0.9, 0.999, 1e-8, 1e-2, 3n, null));
    ok(K.dt_sgd(ptr(q), ptr(g), ptr(b), n64(n), 0.1, 0.9, 0, 0, 0, 1, null));
    return [p, q] as const;
  };
  const one = withThreads(1, run), four = withThreads(4, run);
  assertSameBits(four[0], one[0], "adamw");
  assertSameBits(four[1], one[1], "sgd");
});

Deno.test("optimizer kernels reject a zero step, bad betas and nesterov without momentum", () => {
  const x = new Float32Array(4);
  failsWith(
    K.dt_adamw(ptr(x), ptr(x), ptr(x), ptr(x), 4n, 1e-3, 0.9, 0.999, 1e-8, 0, 0n, null),
    "dt_adamw: step=0 must be >= 1",
  );
  failsWith(
    K.dt_adamw(ptr(x), ptr(x), ptr(x), ptr(x), 4n, 1e-3, 1, 0.999, 1e-8, 0, 1n, null),
    "dt_adamw: betas (1, 0.999)",
  );
  failsWith(
    K.dt_adamw(ptr(x), null, ptr(x), ptr(x), 4n, 1e-3, 0.9, 0.999, 1e-8, 0, 1n, null),
    "dt_adamw: null pointer",
  );
  failsWith(
    K.dt_sgd(ptr(x), ptr(x), ptr(x), 4n, 0.1, 0, 0, 0, 1, 0, null),
    "dt_sgd: nesterov needs momentum > 0",
  );
  failsWith(K.dt_sgd(ptr(x), ptr(x), null, 4n, 0.1, 0.9, 0, 0, 0, 0, null), "dt_sgd: null pointer");
  failsWith(
    K.dt_sgd(ptr(x), ptr(x), ptr(x), -4n, 0.1, 0.9, 0, 0, 0, 0, null),
    "dt_sgd: negative size n=-4",
  );
});

Deno.test("dt_unscale_check() multiplies by 1/scale and flags inf/NaN without ever clearing the flag", () => {
  const rng = new Rng(4);
  const n = 200_001, inv = f(1 / 65536);
  const g = rng.normals(n, 1000), expected = g.map((x) => f(x * inv));
  const found = new Float32Array([0]);
  ok(K.dt_unscale_check(ptr(g), n64(n), inv, ptr(found), null));
  assertSameBits(g, expected, "unscaled gradient");
  assert.equal(found[0], 0);
  for (const bad of [Infinity, -Infinity, NaN]) {
    for (const at of [0, 1000, n - 1]) { // in the first, a middle and the last thread chunk
      const h = rng.normals(n);
      h[at] = bad;
      found[0] = 0;
      ok(K.dt_unscale_check(ptr(h), n64(n), 0.5, ptr(found), null));
      assert.equal(found[0], 1, `${bad} at ${at}`);
    }
  }
  ok(K.dt_unscale_check(ptr(rng.normals(10)), 10n, 0.5, ptr(found), null));
  assert.equal(found[0], 1, "a clean call leaves found_inf set");
  failsWith(K.dt_unscale_check(ptr(g), 4n, 1, null, null), "dt_unscale_check: null found_inf");
});

/** Host tables of a dt_*_many call: tensors' addresses (0 for none) and their sizes. */
function addresses(arrays: (Float32Array<ArrayBuffer> | null)[]): BigUint64Array<ArrayBuffer> {
  return BigUint64Array.from(arrays, (a) => a ? BigInt(Deno.UnsafePointer.value(ptr(a))) : 0n);
}

Deno.test("dt_adamw_many() equals one dt_adamw per tensor bit for bit: own steps and hyperparameters, empty tensors", () => {
  const rng = new Rng(5);
  const sizes = [1, 0, 7, 4096, 4097, 100_003, 0, 33];
  const hypers: AdamW[] = sizes.map((_, t) => ({
    lr: [1e-3, 3e-4, 0.1][t % 3]!,
    beta1: [0.9, 0.8, 0][t % 3]!,
    beta2: [0.999, 0.95, 0.5][t % 3]!,
    eps: [1e-8, 1e-6, 1e-3][t % 3]!,
    wd: [1e-2, 0, 0.5][t % 3]!,
  }));
  const p = sizes.map((n) => rng.normals(n)), pr = p.map((a) => a.slice());
  const m = sizes.map((n) => new Float32Array(n)), mr = m.map((a) => a.slice());
  const v = sizes.map((n) => new Float32Array(n)), vr = v.map((a) => a.slice());
  const counts = BigInt64Array.from(sizes, BigInt);
  const stepOf = (t: number, round: number) => round + 1 + (t % 2) * 5; // tensors at different steps
  for (let round = 0; round < 3; round++) {
    const g = sizes.map((n) => gradients(rng, n));
    const steps = BigInt64Array.from(sizes, (_, t) => BigInt(stepOf(t, round)));
    const hyper = Float64Array.from(hypers.flatMap((h) => [h.lr, h.beta1, h.beta2, h.eps, h.wd]));
    ok(
      K.dt_adamw_many(
        ptr(addresses(p)),
        ptr(addresses(g)),
        ptr(addresses(m)),
        ptr(addresses(v)),
        ptr(counts),
        ptr(steps),
        ptr(hyper),
        n64(sizes.length),
        null,
      ),
    );
    sizes.forEach((n, t) => {
      const h = hypers[t]!;
      ok(
        K.dt_adamw(
          ptr(pr[t]!),
          ptr(g[t]!),
          ptr(mr[t]!),
          ptr(vr[t]!),
          n64(n),
          h.lr,
          h.beta1,
          h.beta2,
          h.eps,
          h.wd,
          n64(stepOf(t, round)),
          null,
        ),
      );
    });
  }
  sizes.forEach((n, t) => {
    assertSameBits(p[t]!, pr[t]!, `param ${t} (${n})`);
    assertSameBits(m[t]!, mr[t]!, `exp_avg ${t} (${n})`);
    assertSameBits(v[t]!, vr[t]!, `exp_avg_sq ${t} (${n})`);
  });
  // no tensors at all is a no-op
  ok(K.dt_adamw_many(null, null, null, null, null, null, null, 0n, null));
});

Deno.test("dt_sgd_many() equals one dt_sgd per tensor bit for bit in every mode at once", () => {
  const rng = new Rng(6);
  const settings: Sgd[] = [
    { lr: 0.1, momentum: 0.9, dampening: 0, wd: 1e-4, nesterov: false },
    { lr: 0.05, momentum: 0.9, dampening: 0.1, wd: 1e-2, nesterov: false },
    { lr: 0.01, momentum: 0.5, dampening: 0, wd: 0, nesterov: true },
    { lr: 0.3, momentum: 0, dampening: 0, wd: 0.1, nesterov: false },
  ];
  const sizes = [9, 0, 100_003, 4096, 1, 4097];
  const hs = sizes.map((_, t) => settings[t % settings.length]!);
  const p = sizes.map((n) => rng.normals(n)), pr = p.map((a) => a.slice());
  // momentum 0: no buffer, as torch keeps none (the kernel must not touch one)
  const buf = sizes.map((n, t) => hs[t]!.momentum === 0 ? null : new Float32Array(n));
  const br = buf.map((a) => a ? a.slice() : new Float32Array(0));
  const counts = BigInt64Array.from(sizes, BigInt);
  const hyper = Float64Array.from(hs.flatMap((h) => [h.lr, h.momentum, h.dampening, h.wd]));
  for (let step = 0; step < 3; step++) {
    const g = sizes.map((n) => rng.normals(n));
    // tensor 0 starts a step late: its buffer is initialised when the others' are not
    const first = (t: number) => t === 0 ? step === 1 : step === 0;
    const flags = Int32Array.from(hs.flatMap((h, t) => [h.nesterov ? 1 : 0, first(t) ? 1 : 0]));
    const skip = (t: number) => t === 0 && step === 0;
    const live = sizes.map((_, t) => t).filter((t) => !skip(t));
    ok(
      K.dt_sgd_many(
        ptr(addresses(live.map((t) => p[t]!))),
        ptr(addresses(live.map((t) => g[t]!))),
        ptr(addresses(live.map((t) => buf[t]!))),
        ptr(BigInt64Array.from(live, (t) => counts[t]!)),
        ptr(Float64Array.from(live.flatMap((t) => [...hyper.subarray(4 * t, 4 * t + 4)]))),
        ptr(Int32Array.from(live.flatMap((t) => [flags[2 * t]!, flags[2 * t + 1]!]))),
        n64(live.length),
        null,
      ),
    );
    for (const t of live) {
      const h = hs[t]!;
      ok(
        K.dt_sgd(
          ptr(pr[t]!),
          ptr(g[t]!),
          h.momentum === 0 ? null : ptr(br[t]!),
          n64(sizes[t]!),
          h.lr,
          h.momentum,
          h.dampening,
          h.wd,
          h.nesterov ? 1 : 0,
          first(t) ? 1 : 0,
          null,
        ),
      );
    }
  }
  sizes.forEach((n, t) => {
    assertSameBits(p[t]!, pr[t]!, `param ${t} (${n}) ${JSON.stringify(hs[t])}`);
    if (buf[t]) assertSameBits(buf[t]!, br[t]!, `momentum buffer ${t}`);
  });
});

Deno.test("dt_adamw_many() and dt_sgd_many() refuse bad tables naming the tensor", () => {
  const x = new Float32Array(4);
  const one = (a: Float32Array<ArrayBuffer> | null) => ptr(addresses([a]));
  const counts = (n: number) => ptr(BigInt64Array.of(BigInt(n)));
  const adamw = (
    o: { step?: bigint; beta1?: number; n?: number; g?: Float32Array<ArrayBuffer> | null },
  ) =>
    K.dt_adamw_many(
      ptr(addresses([x, x])),
      ptr(addresses([x, o.g === undefined ? x : o.g])),
      ptr(addresses([x, x])),
      ptr(addresses([x, x])),
      ptr(BigInt64Array.of(4n, BigInt(o.n ?? 4))),
      ptr(BigInt64Array.of(1n, o.step ?? 1n)),
      ptr(Float64Array.of(1e-3, 0.9, 0.999, 1e-8, 0, 1e-3, o.beta1 ?? 0.9, 0.999, 1e-8, 0)),
      2n,
      null,
    );
  failsWith(adamw({ step: 0n }), "dt_adamw_many: tensor 1: step=0 must be >= 1");
  failsWith(adamw({ beta1: 1 }), "dt_adamw_many: tensor 1: betas (1, 0.999)");
  failsWith(adamw({ g: null }), /^dt_adamw_many: tensor 1 of 4 elements has a null pointer/);
  failsWith(adamw({ n: -4 }), "dt_adamw_many: tensor 1 has a negative size -4");
  ok(adamw({ g: null, n: 0 })); // an empty tensor needs no memory
  failsWith(
    K.dt_adamw_many(null, null, null, null, null, null, null, 2n, null),
    "dt_adamw_many: null table",
  );
  failsWith(
    K.dt_adamw_many(null, null, null, null, null, null, null, -1n, null),
    "dt_adamw_many: negative tensor count -1",
  );
  const sgd = (hyper: number[], flags: number[], buf: Float32Array<ArrayBuffer> | null = x) =>
    K.dt_sgd_many(
      one(x),
      one(x),
      one(buf),
      counts(4),
      ptr(Float64Array.from(hyper)),
      ptr(Int32Array.from(flags)),
      1n,
      null,
    );
  failsWith(sgd([0.1, 0, 0, 0], [1, 0]), "dt_sgd_many: tensor 0: nesterov needs momentum > 0");
  failsWith(
    sgd([0.1, 0.9, 0, 0], [0, 0], null),
    /^dt_sgd_many: tensor 0 of 4 elements has a null pointer/,
  );
  ok(sgd([0.1, 0, 0, 0], [0, 1], null)); // momentum 0 needs no buffer
  failsWith(K.dt_sgd_many(null, null, null, null, null, null, 1n, null), "dt_sgd_many: null table");
});

Deno.test("dt_zero_many() zeroes every tensor of its table, empty ones included, and refuses bad tables", () => {
  const rng = new Rng(7);
  const sizes = [5, 0, 4097, 100_003, 1];
  const ts = sizes.map((n) => rng.normals(n));
  const table = addresses(ts);
  ok(K.dt_zero_many(ptr(table), ptr(BigInt64Array.from(sizes, BigInt)), n64(sizes.length), null));
  ts.forEach((t, i) => assert.ok(t.every((v) => Object.is(v, 0)), `tensor ${i} is not all +0`));
  // a size smaller than the tensor zeroes only that many elements
  const part = rng.normals(10);
  ok(K.dt_zero_many(ptr(addresses([part])), ptr(BigInt64Array.of(4n)), 1n, null));
  assert.deepEqual([...part.subarray(0, 4)], [0, 0, 0, 0]);
  assert.ok(part.subarray(4).every((v) => v !== 0));
  failsWith(
    K.dt_zero_many(ptr(addresses([null])), ptr(BigInt64Array.of(3n)), 1n, null),
    "dt_zero_many: tensor 0 of 3 elements is a null pointer",
  );
  failsWith(K.dt_zero_many(null, null, 1n, null), "dt_zero_many: null table");
  ok(K.dt_zero_many(null, null, 0n, null));
});
