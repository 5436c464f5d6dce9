/**
 * Tests of the row kernels — softmax (with scale and the causal mask) and
 * layer norm, forward and backward — against float64 references, and the
 * backward passes against central finite differences of those references.
 */
import assert from "node:assert/strict";
import {
  assertClose,
  assertSameBits,
  failsWith,
  K,
  layerNormF32,
  n64,
  ok,
  ptr,
  Rng,
  withThreads,
} from "./_helpers.ts";
import { toBf16 as toBf16Bits } from "../../scripts/gpu_check/_harness.ts";

const U = 2 ** -24; // unit roundoff of float32

/** Central-difference gradient of a float64 scalar function. */
function finiteDiff(
  fn: (x: Float64Array) => number,
  x0: ArrayLike<number>,
  h = 1e-4,
): Float64Array {
  const x = Float64Array.from(x0), grad = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const v = x[i]!;
    x[i] = v + h;
    const up = fn(x);
    x[i] = v - h;
    grad[i] = (up - fn(x)) / (2 * h);
    x[i] = v;
  }
  return grad;
}

const maxAbs = (a: ArrayLike<number>) =>
  Array.from(a).reduce((m, v) => Math.max(m, Math.abs(v)), 0);

// ---- softmax -------------------------------------------------------------------

/** softmax(scale * x) per row in float64 (scale * x first rounded to float32, as the kernel and torch do). */
function softmaxRef(
  x: ArrayLike<number>,
  rows: number,
  cols: number,
  causalT: number,
  scale: number,
): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const visible = causalT > 0 ? Math.min(cols, (r % causalT) + 1) : cols;
    let max = -Infinity;
    for (let j = 0; j < visible; j++) max = Math.max(max, Math.fround(scale * x[r * cols + j]!));
    let sum = 0;
    for (let j = 0; j < visible; j++) sum += Math.exp(Math.fround(scale * x[r * cols + j]!) - max);
    for (let j = 0; j < visible; j++) {
      out[r * cols + j] = Math.exp(Math.fround(scale * x[r * cols + j]!) - max) / sum;
    }
  }
  return out;
}

Deno.test("dt_softmax_fwd() matches float64 softmax, with masked columns exactly 0", () => {
  const rng = new Rng(1);
  // [rows, cols, causal_t, scale]: attention (B*H*T rows of T), a plain wide softmax, odd sizes
  const cases: [number, number, number, number][] = [
    [2 * 4 * 64, 64, 64, 0.25],
    [64, 1000, 0, 1],
    [37, 7, 0, 1.7],
    [3 * 5, 5, 5, 1],
    [12, 9, 4, 0.5], // causal_t < cols: visible = r % 4 + 1
    [1, 1, 0, 1],
  ];
  for (const [rows, cols, causalT, scale] of cases) {
    const x = rng.normals(rows * cols, 3);
    const out = new Float32Array(rows * cols).fill(NaN);
    ok(K.dt_softmax_fwd(ptr(out), ptr(x), n64(rows), n64(cols), n64(causalT), scale, null));
    const ref = softmaxRef(x, rows, cols, causalT, Math.fround(scale)); // the kernel takes scale as f32
    for (let i = 0; i < out.length; i++) {
      if (ref[i] === 0) {
        assert.ok(
          Object.is(out[i], 0),
          `masked element ${i} is ${out[i]}, not +0 (${rows}x${cols} causal ${causalT})`,
        );
        continue;
      }
      // expf (< 1 ulp), the float rounding of z - max (relative error ~|z - max| * U), the
      // float reciprocal of the sum and the final product: a few ulps in all.
      const z = Math.abs(Math.log(ref[i]!));
      const tol = (8 + 2 * z) * U;
      if (!(Math.abs(out[i]! - ref[i]!) <= tol * ref[i]!)) {
        assert.fail(
          `${rows}x${cols} causal ${causalT}: element ${i} = ${out[i]}, expected ${ref[i]}`,
        );
      }
    }
  }
});

Deno.test("dt_softmax_bwd() matches finite differences of the float64 softmax", () => {
  const rng = new Rng(2);
  const rows = 6, cols = 5, scale = 0.7;
  const x = rng.normals(rows * cols), dout = rng.normals(rows * cols);
  const out = new Float32Array(rows * cols), dinp = new Float32Array(rows * cols);
  ok(K.dt_softmax_fwd(ptr(out), ptr(x), n64(rows), n64(cols), 0n, scale, null));
  ok(K.dt_softmax_bwd(ptr(dinp), ptr(dout), ptr(out), n64(rows), n64(cols), scale, null));
  // loss = sum(dout * softmax(scale * x)), without the float32 rounding of scale * x
  const loss = (v: Float64Array) => {
    let s = 0;
    for (let r = 0; r < rows; r++) {
      const row = Array.from(v.subarray(r * cols, r * cols + cols), (t) => scale * t);
      const m = Math.max(...row),
        e = row.map((t) => Math.exp(t - m)),
        z = e.reduce((a, b) => a + b);
      e.forEach((t, j) => (s += dout[r * cols + j]! * t / z));
    }
    return s;
  };
  const fd = finiteDiff(loss, x, 1e-5);
  // Finite-difference error ~1e-9; the kernel's float32 arithmetic errs by ~1e-7 of the gradient scale.
  assertClose(dinp, fd, 2e-5, "softmax bwd vs finite differences", maxAbs(fd));
});

Deno.test("dt_softmax_bwd() matches the float64 formula on large inputs, on any thread count", () => {
  const rng = new Rng(3);
  const rows = 4 * 4 * 128, cols = 128, scale = 0.125;
  const x = rng.normals(rows * cols, 2), dout = rng.normals(rows * cols);
  const out = new Float32Array(rows * cols);
  ok(K.dt_softmax_fwd(ptr(out), ptr(x), n64(rows), n64(cols), 128n, scale, null));
  const run = () => {
    const dinp = new Float32Array(rows * cols);
    ok(K.dt_softmax_bwd(ptr(dinp), ptr(dout), ptr(out), n64(rows), n64(cols), scale, null));
    return dinp;
  };
  const one = withThreads(1, run), three = withThreads(3, run);
  assertSameBits(three, one, "softmax bwd on 1 vs 3 threads");
  for (let r = 0; r < rows; r++) {
    let dot = 0, scaleOfRow = 0;
    for (let j = 0; j < cols; j++) dot += dout[r * cols + j]! * out[r * cols + j]!;
    for (let j = 0; j < cols; j++) {
      scaleOfRow = Math.max(scaleOfRow, Math.abs(dout[r * cols + j]!) + Math.abs(dot));
    }
    for (let j = 0; j < cols; j++) {
      const i = r * cols + j;
      const ref = scale * out[i]! * (dout[i]! - dot);
      // dout - dot cancels: its error is ~U * (|dout| + |dot|), then scaled by out and scale.
      const tol = 4 * U * scale * out[i]! * scaleOfRow;
      if (!(Math.abs(one[i]! - ref) <= tol)) assert.fail(`row ${r} col ${j}: ${one[i]} vs ${ref}`);
    }
  }
});

Deno.test("softmax kernels reject bad sizes", () => {
  const x = new Float32Array(4);
  failsWith(
    K.dt_softmax_fwd(ptr(x), ptr(x), 2n, 0n, 0n, 1, null),
    "dt_softmax_fwd: cols=0 must be >= 1",
  );
  failsWith(
    K.dt_softmax_fwd(ptr(x), ptr(x), 2n, 2n, -1n, 1, null),
    "dt_softmax_fwd: negative causal_t=-1",
  );
  failsWith(
    K.dt_softmax_fwd(ptr(x), ptr(x), 2n ** 62n, 8n, 0n, 1, null),
    "dt_softmax_fwd: rows*cols overflows",
  );
  failsWith(
    K.dt_softmax_bwd(ptr(x), null, ptr(x), 2n, 2n, 1, null),
    "dt_softmax_bwd: null pointer",
  );
});

// ---- layer norm -------------------------------------------------------------------

interface LayerNormRef {
  y: Float64Array;
  mean: Float64Array;
  rstd: Float64Array;
}

/** Layer norm in float64: biased variance, eps inside the sqrt; weight/bias null mean 1 and 0. */
function layerNormRef(
  x: ArrayLike<number>,
  w: ArrayLike<number> | null,
  b: ArrayLike<number> | null,
  rows: number,
  C: number,
  eps: number,
): LayerNormRef {
  const y = new Float64Array(rows * C),
    mean = new Float64Array(rows),
    rstd = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let j = 0; j < C; j++) s += x[r * C + j]!;
    const m = s / C;
    let q = 0;
    for (let j = 0; j < C; j++) q += (x[r * C + j]! - m) ** 2;
    const rs = 1 / Math.sqrt(q / C + eps);
    for (let j = 0; j < C; j++) {
      y[r * C + j] = (x[r * C + j]! - m) * rs * (w ? w[j]! : 1) + (b ? b[j]! : 0);
    }
    [mean[r], rstd[r]] = [m, rs];
  }
  return { y, mean, rstd };
}

type F32 = Float32Array<ArrayBuffer>;

Deno.test("dt_layernorm_fwd() matches float64 layer norm, with and without weight and bias", () => {
  const rng = new Rng(4);
  for (const [rows, C] of [[1, 1], [3, 7], [256, 64], [64, 1000], [2048, 33]] as const) {
    // an offset mean and a large spread test the variance's numerical soundness
    const x = rng.normals(rows * C, 3).map((v) => v + 20);
    const w = rng.normals(C), b = rng.normals(C);
    for (const [wi, bi] of [[w, b], [null, null], [w, null]] as const) {
      const { out, mean, rstd } = layerNormF32(x, wi, bi, rows, C, 1e-5);
      const ref = layerNormRef(x, wi, bi, rows, C, Math.fround(1e-5));
      assertClose(mean, ref.mean, 2 * U, `mean ${rows}x${C}`);
      // var rounded to float, + eps, sqrtf, reciprocal: ~4 roundings
      assertClose(rstd, ref.rstd, 5 * U, `rstd ${rows}x${C}`);
      for (let i = 0; i < out.length; i++) {
        const j = i % C, r = Math.floor(i / C);
        const wj = wi ? Math.abs(wi[j]!) : 1, bj = bi ? Math.abs(bi[j]!) : 0;
        // x * rstd + shift cancels (shift = -rstd * mean carries an error of U * |mean| * rstd)
        const tol = 4 * U * ((Math.abs(x[i]!) + ref.mean[r]!) * ref.rstd[r]! * wj + bj) +
          4 * U * Math.abs(ref.y[i]!);
        if (!(Math.abs(out[i]! - ref.y[i]!) <= tol)) {
          assert.fail(`${rows}x${C} element ${i}: ${out[i]} vs ${ref.y[i]}`);
        }
      }
    }
  }
});

Deno.test("dt_layernorm_bwd() matches finite differences of the float64 layer norm", () => {
  const rng = new Rng(5);
  const rows = 4, C = 6, eps = 1e-5;
  const x = rng.normals(rows * C, 2),
    w = rng.normals(C),
    b = rng.normals(C),
    dout = rng.normals(rows * C);
  const { mean, rstd } = layerNormF32(x, w, b, rows, C, eps);
  const dinp = new Float32Array(rows * C), dw = new Float32Array(C), db = new Float32Array(C);
  ok(
    K.dt_layernorm_bwd(
      ptr(dinp),
      ptr(dw),
      ptr(db),
      ptr(dout),
      ptr(x),
      ptr(w),
      ptr(mean),
      ptr(rstd),
      n64(rows),
      n64(C),
      0,
      0,
      0,
      0,
      null,
    ),
  );
  const loss = (xv: ArrayLike<number>, wv: ArrayLike<number>, bv: ArrayLike<number>) =>
    layerNormRef(xv, wv, bv, rows, C, Math.fround(eps)).y.reduce((s, v, i) => s + v * dout[i]!, 0);
  const fdX = finiteDiff((v) => loss(v, w, b), x);
  const fdW = finiteDiff((v) => loss(x, v, b), w);
  const fdB = finiteDiff((v) => loss(x, w, v), b);
  // Finite differences err by ~1e-8 here; the kernel by ~1e-6 of each gradient's scale.
  assertClose(dinp, fdX, 1e-5, "dinp", maxAbs(fdX));
  assertClose(dw, fdW, 1e-5, "dweight", maxAbs(fdW));
  assertClose(db, fdB, 1e-5, "dbias", maxAbs(fdB));
});

/** The layer-norm gradients in float64, from the float64 mean and rstd. */
function layerNormBwdRef(
  x: Float32Array,
  w: Float32Array | null,
  dout: Float32Array,
  rows: number,
  C: number,
) {
  const { mean, rstd } = layerNormRef(x, null, null, rows, C, Math.fround(1e-5));
  const dx = new Float64Array(rows * C), dw = new Float64Array(C), db = new Float64Array(C);
  for (let r = 0; r < rows; r++) {
    let sg = 0, sgx = 0;
    const xhat = (j: number) => (x[r * C + j]! - mean[r]!) * rstd[r]!;
    for (let j = 0; j < C; j++) {
      const g = dout[r * C + j]! * (w ? w[j]! : 1);
      sg += g;
      sgx += g * xhat(j);
      dw[j]! += dout[r * C + j]! * xhat(j);
      db[j]! += dout[r * C + j]!;
    }
    for (let j = 0; j < C; j++) {
      const g = dout[r * C + j]! * (w ? w[j]! : 1);
      dx[r * C + j] = rstd[r]! * (g - sg / C - xhat(j) * sgx / C);
    }
  }
  return { dx, dw, db };
}

Deno.test("dt_layernorm_bwd() matches the float64 gradients on large inputs, on any thread count", () => {
  const rng = new Rng(6);
  for (
    const [rows, C, withWeight] of [[2048, 64, true], [16, 3000, false], [1, 1, true]] as const
  ) {
    const x = rng.normals(rows * C, 2).map((v) => v - 5), dout = rng.normals(rows * C);
    const w = withWeight ? rng.normals(C) : null;
    const { mean, rstd } = layerNormF32(x, w, null, rows, C, 1e-5);
    const run = () => {
      const dinp = new Float32Array(rows * C), dw = new Float32Array(C), db = new Float32Array(C);
      ok(
        K.dt_layernorm_bwd(
          ptr(dinp),
          ptr(dw),
          ptr(db),
          ptr(dout),
          ptr(x),
          w && ptr(w),
          ptr(mean),
          ptr(rstd),
          n64(rows),
          n64(C),
          0,
          0,
          0,
          0,
          null,
        ),
      );
      return [dinp, dw, db] as const;
    };
    const one = withThreads(1, run), four = withThreads(4, run);
    for (let k = 0; k < 3; k++) {
      assertSameBits(
        four[k]!,
        one[k]!,
        `${rows}x${C} output ${k}: 1 vs 4 threads`,
      );
    }
    const ref = layerNormBwdRef(x, w, dout, rows, C);
    // Measured against each gradient's typical size: per-element relative error is
    // meaningless where g - mean(g) - xhat * mean(g xhat) cancels to ~0.
    const typical = (a: Float64Array) => a.reduce((s, v) => s + Math.abs(v), 0) / a.length;
    assertClose(one[0], ref.dx, 5e-6, `dinp ${rows}x${C}`, typical(ref.dx));
    assertClose(one[1], ref.dw, 5e-6, `dweight ${rows}x${C}`, typical(ref.dw));
    assertClose(one[2], ref.db, 1e-6, `dbias ${rows}x${C}`, typical(ref.db));
  }
});

Deno.test("dt_layernorm_bwd() accepts null dweight/dbias and zeroes them for zero rows", () => {
  const rng = new Rng(7);
  const x = rng.normals(12), dout = rng.normals(12);
  const { mean, rstd } = layerNormF32(x, null, null, 3, 4, 1e-5);
  const dinp = new Float32Array(12);
  ok(
    K.dt_layernorm_bwd(
      ptr(dinp),
      null,
      null,
      ptr(dout),
      ptr(x),
      null,
      ptr(mean),
      ptr(rstd),
      3n,
      4n,
      0,
      0,
      0,
      0,
      null,
    ),
  );
  assertClose(dinp, layerNormBwdRef(x, null, dout, 3, 4).dx, 1e-5, "dinp without parameters", 0.1);
  const dw = new Float32Array(4).fill(9), db = new Float32Array(4).fill(9);
  ok(
    K.dt_layernorm_bwd(
      null,
      ptr(dw),
      ptr(db),
      null,
      null,
      null,
      null,
      null,
      0n,
      4n,
      0,
      0,
      0,
      0,
      null,
    ),
  );
  assertSameBits(dw, new Float32Array(4), "dweight of zero rows");
  assertSameBits(db, new Float32Array(4), "dbias of zero rows");
});

Deno.test("layer norm kernels reject bad sizes and missing saved statistics", () => {
  const x = new Float32Array(8);
  failsWith(
    K.dt_layernorm_fwd(
      ptr(x),
      null,
      null,
      ptr(x),
      null,
      null,
      2n,
      0n,
      1e-5,
      0,
      0,
      null,
      0,
      null,
      null,
    ),
    "dt_layernorm_fwd: cols=0",
  );
  failsWith(
    K.dt_layernorm_fwd(
      ptr(x),
      null,
      null,
      ptr(x),
      null,
      null,
      2n,
      4n,
      -1,
      0,
      0,
      null,
      0,
      null,
      null,
    ),
    "dt_layernorm_fwd: eps=-1",
  );
  failsWith(
    K.dt_layernorm_fwd(
      ptr(x),
      null,
      null,
      ptr(x),
      null,
      null,
      -2n,
      4n,
      1e-5,
      0,
      0,
      null,
      0,
      null,
      null,
    ),
    "negative rows=-2",
  );
  failsWith(
    K.dt_layernorm_bwd(
      ptr(x),
      null,
      null,
      ptr(x),
      ptr(x),
      null,
      null,
      ptr(x),
      2n,
      4n,
      0,
      0,
      0,
      0,
      null,
    ),
    "dt_layernorm_bwd: null pointer",
  );
});

type Buf = Float32Array<ArrayBuffer> | Uint16Array<ArrayBuffer>;
const toBf16 = (x: Float32Array) => toBf16Bits(x) as Uint16Array<ArrayBuffer>;
const fromBf16 = (h: Uint16Array) =>
  Float32Array.from(h, (v) => new Float32Array(new Uint32Array([v << 16]).buffer)[0]!);

Deno.test("dt_layernorm_fwd() adds a residual in the input's dtype, keeps the sum, writes bf16 or f32", () => {
  const rng = new Rng(8);
  for (const [rows, C] of [[1, 1], [5, 33], [64, 768]] as const) {
    const n = rows * C;
    const x = toBf16(rng.normals(n, 2).map((v) => v + 3)), r = rng.normals(n);
    const w = rng.normals(C), b = rng.normals(C);
    // the sum rounded once to bf16, as f32 + f32 then bf16
    const want = toBf16(Float32Array.from(fromBf16(x), (v, i) => v + r[i]!));
    const run = (outDtype: number) => {
      const out = outDtype === 0 ? new Float32Array(n) : new Uint16Array(n);
      const sum = new Uint16Array(n), mean = new Float32Array(rows), rstd = new Float32Array(rows);
      ok(
        K.dt_layernorm_fwd(
          ptr(out),
          ptr(mean),
          ptr(rstd),
          ptr(x),
          ptr(w),
          ptr(b),
          n64(rows),
          n64(C),
          1e-5,
          outDtype,
          1,
          ptr(r),
          0,
          ptr(sum),
          null,
        ),
      );
      return { out, sum, mean, rstd };
    };
    const f = run(0), h = run(1);
    assertSameBits(f.sum, want, `sum ${rows}x${C}`);
    assertSameBits(h.sum, want, `sum ${rows}x${C} (bf16 out)`);
    const ref = layerNormRef(fromBf16(want), w, b, rows, C, Math.fround(1e-5));
    assertClose(f.mean, ref.mean, 4 * U, `mean ${rows}x${C}`, 1);
    assertClose(f.out, ref.y, 1e-5, `out ${rows}x${C}`, 1);
    // bf16 out: the f32 result rounded once
    assertSameBits(h.out, toBf16(f.out as Float32Array), `bf16 out ${rows}x${C}`);
  }
});

Deno.test("dt_layernorm_bwd() adds into dinp and the parameter gradients with flags, reads bf16 rows", () => {
  const rng = new Rng(9);
  for (const [rows, C] of [[3, 5], [40, 300]] as const) {
    const n = rows * C;
    const x32 = rng.normals(n, 2), dy32 = rng.normals(n), w = rng.normals(C);
    const { mean, rstd } = layerNormF32(x32, w, null, rows, C, 1e-5);
    const bwd = (
      dinp: Buf,
      dw: F32,
      db: F32,
      dout: Buf,
      inp: Buf,
      dt: number | readonly [dout: number, inp: number, dinp: number],
      flags: number,
      m = mean,
      rs = rstd,
    ) => {
      const [dtOut, dtInp, dtDinp] = typeof dt === "number" ? [dt, dt, dt] : dt;
      ok(
        K.dt_layernorm_bwd(
          ptr(dinp),
          ptr(dw),
          ptr(db),
          ptr(dout),
          ptr(inp),
          ptr(w),
          ptr(m),
          ptr(rs),
          n64(rows),
          n64(C),
          dtOut,
          dtInp,
          dtDinp,
          flags,
          null,
        ),
      );
    };
    const dx = new Float32Array(n), dw = new Float32Array(C), db = new Float32Array(C);
    bwd(dx, dw, db, dy32, x32, 0, 0);
    // flags 3: each result is the overwritten one added to what was there, in f32
    const ax = rng.normals(n), aw = rng.normals(C), ab = rng.normals(C);
    const [sx, sw, sb] = [ax.slice(), aw.slice(), ab.slice()];
    bwd(ax, aw, ab, dy32, x32, 0, 3);
    assertSameBits(ax, sx.map((v, i) => v + dx[i]!), `dinp += ${rows}x${C}`);
    assertSameBits(aw, sw.map((v, i) => v + dw[i]!), `dweight += ${rows}x${C}`);
    assertSameBits(ab, sb.map((v, i) => v + db[i]!), `dbias += ${rows}x${C}`);
    // flag 1 only: the parameter gradients are overwritten
    const bw = rng.normals(C), bb = rng.normals(C);
    bwd(ax.slice(), bw, bb, dy32, x32, 0, 1);
    assertSameBits(bw, dw, "dweight with flag 1");
    assertSameBits(bb, db, "dbias with flag 1");
    // bf16 rows: the gradients of the widened values, dinp rounded once
    const x16 = toBf16(x32), dy16 = toBf16(dy32);
    const xw = fromBf16(x16), dyw = fromBf16(dy16);
    const m16 = layerNormF32(xw, w, null, rows, C, 1e-5);
    const dx16 = new Uint16Array(n), dw16 = new Float32Array(C), db16 = new Float32Array(C);
    bwd(dx16, dw16, db16, dy16, x16, 1, 0, m16.mean, m16.rstd);
    const wdx = new Float32Array(n), wdw = new Float32Array(C), wdb = new Float32Array(C);
    bwd(wdx, wdw, wdb, dyw, xw, 0, 0, m16.mean, m16.rstd);
    assertSameBits(dx16, toBf16(wdx), `bf16 dinp ${rows}x${C}`);
    assertSameBits(dw16, wdw, `dweight of bf16 rows ${rows}x${C}`);
    assertSameBits(db16, wdb, `dbias of bf16 rows ${rows}x${C}`);
    // bf16 gradient rows, f32 input and dinp (as under autocast): the bits of the widened rows in f32
    const mdx = new Float32Array(n), mdw = new Float32Array(C), mdb = new Float32Array(C);
    bwd(mdx, mdw, mdb, dy16, x32, [1, 0, 0], 0);
    const fdx = new Float32Array(n), fdw = new Float32Array(C), fdb = new Float32Array(C);
    bwd(fdx, fdw, fdb, dyw, x32, 0, 0);
    assertSameBits(mdx, fdx, `f32 dinp of bf16 gradient rows ${rows}x${C}`);
    assertSameBits(mdw, fdw, `dweight of bf16 gradient rows ${rows}x${C}`);
    assertSameBits(mdb, fdb, `dbias of bf16 gradient rows ${rows}x${C}`);
  }
});

Deno.test("dt_layernorm_fwd() with an f32 input, an f32 or bf16 residual and the sum kept: the bits of normalising the sum", () => {
  // The f32 sum is made straight into sum_out's row and normalised from there; it must be
  // x + r rounded once, and the outputs those of layer norm run on that sum without a residual.
  const rng = new Rng(9);
  for (const [rows, C] of [[1, 1], [5, 33], [64, 768]] as const) {
    const n = rows * C;
    const x = rng.normals(n, 2), w = rng.normals(C), b = rng.normals(C);
    for (const resBf16 of [false, true]) {
      const r = resBf16 ? toBf16(rng.normals(n)) : rng.normals(n);
      const rf = resBf16 ? fromBf16(r as Uint16Array) : (r as Float32Array);
      const want = Float32Array.from(x, (v, i) => v + rf[i]!);
      const sum = new Float32Array(n);
      const fused = layerNormF32(x, w, b, rows, C, 1e-5, { res: r, resBf16, sum });
      const plain = layerNormF32(want, w, b, rows, C, 1e-5);
      const what = `${rows}x${C}, ${resBf16 ? "bf16" : "f32"} residual`;
      assertSameBits(sum, want, `sum ${what}`);
      assertSameBits(fused.out, plain.out, `out ${what}`);
      assertSameBits(fused.mean, plain.mean, `mean ${what}`);
      assertSameBits(fused.rstd, plain.rstd, `rstd ${what}`);
    }
  }
});

Deno.test("layer norm kernels reject bad dtypes, flags and a sum without a residual", () => {
  const x = new Float32Array(8), m = new Float32Array(2);
  failsWith(
    K.dt_layernorm_fwd(
      ptr(x),
      null,
      null,
      ptr(x),
      null,
      null,
      2n,
      4n,
      1e-5,
      3,
      0,
      null,
      0,
      null,
      null,
    ),
    "dtypes (out 3, inp 0, res 0)",
  );
  failsWith(
    K.dt_layernorm_fwd(
      ptr(x),
      null,
      null,
      ptr(x),
      null,
      null,
      2n,
      4n,
      1e-5,
      0,
      0,
      null,
      0,
      ptr(m),
      null,
    ),
    "sum_out needs a residual",
  );
  failsWith(
    K.dt_layernorm_fwd(
      ptr(x),
      null,
      null,
      ptr(x),
      null,
      null,
      2n,
      4n,
      1e-5,
      0,
      0,
      ptr(m),
      0,
      ptr(x),
      null,
    ),
    "sum_out must not alias",
  );
  failsWith(
    K.dt_layernorm_bwd(
      ptr(x),
      null,
      null,
      ptr(x),
      ptr(x),
      null,
      ptr(m),
      ptr(m),
      2n,
      4n,
      0,
      0,
      0,
      4,
      null,
    ),
    "flags=4",
  );
});
