/**
 * Tests of the batch-norm kernels on (N, C, HW) against float64 references:
 * statistics, output and running averages (momentum and cumulative), the
 * backward in training and eval mode, and the property a synchronised batch
 * norm rests on — statistics from per-part sums added together (what an
 * all-reduce does) equal the whole batch's.
 */
import assert from "node:assert/strict";
import { assertClose, assertSameBits, failsWith, K, n64, ok, ptr, Rng } from "./_helpers.ts";

interface BnRef {
  mean: Float64Array;
  varB: Float64Array;
  rstd: Float64Array;
  out: Float64Array;
}

function bnRef(
  x: Float32Array,
  N: number,
  C: number,
  HW: number,
  w: Float32Array,
  b: Float32Array,
  eps: number,
): BnRef {
  const M = N * HW,
    mean = new Float64Array(C),
    varB = new Float64Array(C),
    rstd = new Float64Array(C);
  const at = (n: number, c: number, i: number) => (n * C + c) * HW + i;
  for (let c = 0; c < C; c++) {
    let s = 0;
    for (let n = 0; n < N; n++) for (let i = 0; i < HW; i++) s += x[at(n, c, i)]!;
    mean[c] = s / M;
    let q = 0;
    for (let n = 0; n < N; n++) for (let i = 0; i < HW; i++) q += (x[at(n, c, i)]! - mean[c]!) ** 2;
    varB[c] = q / M;
    rstd[c] = 1 / Math.sqrt(varB[c]! + eps);
  }
  const out = new Float64Array(x.length);
  for (let n = 0; n < N; n++) {
    for (let c = 0; c < C; c++) {
      for (let i = 0; i < HW; i++) {
        out[at(n, c, i)] = (x[at(n, c, i)]! - mean[c]!) * rstd[c]! * w[c]! + b[c]!;
      }
    }
  }
  return { mean, varB, rstd, out };
}

/** The forward steps of one batch: sums, squared deviations, statistics, output. */
function forward(
  x: Float32Array<ArrayBuffer>,
  N: number,
  C: number,
  HW: number,
  w: Float32Array<ArrayBuffer>,
  b: Float32Array<ArrayBuffer>,
  eps: number,
  running?: {
    mean: Float32Array<ArrayBuffer>;
    var: Float32Array<ArrayBuffer>;
    count: BigInt64Array<ArrayBuffer>;
    momentum: number;
  },
) {
  const acc = new Float64Array(C + 1), sq = new Float64Array(C);
  const mean = new Float32Array(C), rstd = new Float32Array(C), out = new Float32Array(x.length);
  ok(K.dt_bn_sum(ptr(acc), ptr(x), n64(N), n64(C), n64(HW), null));
  ok(K.dt_bn_sqdev(ptr(sq), ptr(x), ptr(acc), n64(N), n64(C), n64(HW), null));
  ok(K.dt_bn_finalize(
    ptr(mean),
    ptr(rstd),
    running ? ptr(running.mean) : null,
    running ? ptr(running.var) : null,
    running ? ptr(running.count) : null,
    ptr(acc),
    ptr(sq),
    n64(C),
    eps,
    running?.momentum ?? 0.1,
    null,
  ));
  ok(
    K.dt_bn_apply(
      ptr(out),
      ptr(x),
      ptr(mean),
      ptr(rstd),
      ptr(w),
      ptr(b),
      n64(N),
      n64(C),
      n64(HW),
      null,
    ),
  );
  return { acc, sq, mean, rstd, out };
}

const U = 2 ** -24;
const SHAPES: [number, number, number][] = [[4, 3, 25], [64, 8, 1], [2, 5, 300], [1, 2, 7]];

Deno.test("batch-norm forward kernels match float64 statistics and output", () => {
  const rng = new Rng(1);
  for (const [N, C, HW] of SHAPES) {
    const x = Float32Array.from(rng.normals(N * C * HW, 2), (v) => Math.fround(v + 3));
    const w = rng.normals(C), b = rng.normals(C);
    const ref = bnRef(x, N, C, HW, w, b, 1e-5);
    const got = forward(x, N, C, HW, w, b, 1e-5);
    assert.equal(got.acc[C], N * HW, "count");
    assertClose(got.mean, ref.mean, U, `mean [${N}, ${C}, ${HW}]`);
    assertClose(got.rstd, ref.rstd, 2 * U, `rstd [${N}, ${C}, ${HW}]`);
    // out = x * alpha + beta: roundings of alpha, beta and two operations on terms of size |x| * rstd * |w|
    for (let k = 0; k < x.length; k++) {
      const c = Math.floor(k / HW) % C;
      const scale = (Math.abs(x[k]!) + Math.abs(ref.mean[c]!)) * ref.rstd[c]! * Math.abs(w[c]!) +
        Math.abs(b[c]!);
      assert.ok(
        Math.abs(got.out[k]! - ref.out[k]!) <= 8 * U * scale,
        `out [${N}, ${C}, ${HW}] at ${k}`,
      );
    }
  }
});

Deno.test("dt_bn_finalize() updates running statistics with momentum or as a cumulative average", () => {
  const rng = new Rng(2);
  const [N, C, HW] = [6, 4, 10];
  const w = new Float32Array(C).fill(1), b = new Float32Array(C);
  for (const momentum of [0.1, -1]) {
    const running = {
      mean: rng.normals(C),
      var: Float32Array.from(rng.normals(C), (v) => Math.abs(v) + 0.5),
      count: BigInt64Array.of(3n),
      momentum,
    };
    const rm0 = Float64Array.from(running.mean), rv0 = Float64Array.from(running.var);
    const x = rng.normals(N * C * HW);
    const ref = bnRef(x, N, C, HW, w, b, 1e-5);
    forward(x, N, C, HW, w, b, 1e-5, running);
    assert.equal(running.count[0], 4n, "num_batches_tracked");
    const f = momentum === -1 ? 1 / 4 : momentum, M = N * HW;
    assertClose(
      running.mean,
      Array.from(rm0, (r, c) => f * ref.mean[c]! + (1 - f) * r),
      2 * U,
      "running mean",
      1e-3,
    );
    assertClose(
      running.var,
      Array.from(rv0, (r, c) => f * ref.varB[c]! * M / (M - 1) + (1 - f) * r),
      2 * U,
      "running var",
    );
  }
});

Deno.test("statistics from the parts' sums added together equal the whole batch's (synchronised batch norm)", () => {
  const rng = new Rng(3);
  const [C, HW] = [5, 9];
  const counts = [3, 7];
  const parts = counts.map((n) =>
    Float32Array.from(rng.normals(n * C * HW, 1.5), (v) => Math.fround(v - 2))
  );
  const whole = new Float32Array(parts[0]!.length + parts[1]!.length);
  whole.set(parts[0]!), whole.set(parts[1]!, parts[0]!.length);
  const w = rng.normals(C), b = rng.normals(C);
  const full = forward(whole, 10, C, HW, w, b, 1e-5);
  const accs = parts.map((p, r) => {
    const acc = new Float64Array(C + 1);
    ok(K.dt_bn_sum(ptr(acc), ptr(p), n64(counts[r]!), n64(C), n64(HW), null));
    return acc;
  });
  const acc = accs[0]!.map((v, i) => v + accs[1]![i]!);
  assert.equal(acc[C], 10 * HW);
  const sqs = parts.map((p, r) => {
    const sq = new Float64Array(C);
    ok(K.dt_bn_sqdev(ptr(sq), ptr(p), ptr(acc), n64(counts[r]!), n64(C), n64(HW), null));
    return sq;
  });
  const sq = sqs[0]!.map((v, i) => v + sqs[1]![i]!);
  const mean = new Float32Array(C), rstd = new Float32Array(C);
  ok(
    K.dt_bn_finalize(
      ptr(mean),
      ptr(rstd),
      null,
      null,
      null,
      ptr(acc),
      ptr(sq),
      n64(C),
      1e-5,
      0.1,
      null,
    ),
  );
  assertClose(mean, full.mean, U, "mean");
  assertClose(rstd, full.rstd, U, "rstd");
});

Deno.test("batch-norm backward kernels give torch's gradients in training and eval mode", () => {
  const rng = new Rng(4);
  for (const [N, C, HW] of SHAPES) {
    const x = rng.normals(N * C * HW, 2),
      w = rng.normals(C),
      b = rng.normals(C),
      dy = rng.normals(N * C * HW);
    const fw = forward(x, N, C, HW, w, b, 1e-5);
    const acc = new Float64Array(2 * C), dw = new Float32Array(C), db = new Float32Array(C);
    ok(
      K.dt_bn_bwd_reduce(
        ptr(acc),
        ptr(dw),
        ptr(db),
        ptr(dy),
        ptr(x),
        ptr(fw.mean),
        ptr(fw.rstd),
        n64(N),
        n64(C),
        n64(HW),
        null,
      ),
    );
    const count = Float64Array.of(N * HW);
    const dx = new Float32Array(x.length), dxEval = new Float32Array(x.length);
    ok(
      K.dt_bn_bwd_apply(
        ptr(dx),
        ptr(dy),
        ptr(x),
        ptr(fw.mean),
        ptr(fw.rstd),
        ptr(w),
        ptr(acc),
        ptr(count),
        n64(N),
        n64(C),
        n64(HW),
        null,
      ),
    );
    ok(
      K.dt_bn_bwd_apply(
        ptr(dxEval),
        ptr(dy),
        ptr(x),
        ptr(fw.mean),
        ptr(fw.rstd),
        ptr(w),
        null,
        null,
        n64(N),
        n64(C),
        n64(HW),
        null,
      ),
    );
    const M = N * HW;
    for (let c = 0; c < C; c++) {
      const mean = fw.mean[c]!, rstd = fw.rstd[c]!;
      let sdy = 0, sdyx = 0, sabs = 0;
      const idx: number[] = [];
      for (let n = 0; n < N; n++) for (let i = 0; i < HW; i++) idx.push((n * C + c) * HW + i);
      for (const k of idx) {
        sdy += dy[k]!;
        sdyx += dy[k]! * (x[k]! - mean);
        sabs += Math.abs(dy[k]! * (x[k]! - mean));
      }
      assert.ok(Math.abs(db[c]! - sdy) <= 2 * U * Math.abs(sdy), `dbias [${N}, ${C}, ${HW}] c${c}`);
      assert.ok(
        Math.abs(dw[c]! - sdyx * rstd) <= 4 * U * sabs * rstd,
        `dweight [${N}, ${C}, ${HW}] c${c}`,
      );
      for (const k of idx) {
        const xhat = (x[k]! - mean) * rstd;
        const want = (dy[k]! - sdy / M - xhat * sdyx * rstd / M) * rstd * w[c]!;
        const scale = (Math.abs(dy[k]!) + Math.abs(sdy / M) + Math.abs(xhat * sabs * rstd / M)) *
          rstd * Math.abs(w[c]!);
        assert.ok(
          Math.abs(dx[k]! - want) <= 16 * U * scale,
          `dx [${N}, ${C}, ${HW}] at ${k}: ${dx[k]} vs ${want}`,
        );
        const wantEval = dy[k]! * rstd * w[c]!;
        assert.ok(Math.abs(dxEval[k]! - wantEval) <= 2 * U * Math.abs(wantEval), `dx eval at ${k}`);
      }
    }
  }
});

Deno.test("dt_bn_eval_stats() takes the running statistics, rstd in float32", () => {
  const rm = Float32Array.of(0.5, -1),
    rv = Float32Array.of(4, 0.25),
    mean = new Float32Array(2),
    rstd = new Float32Array(2);
  ok(K.dt_bn_eval_stats(ptr(mean), ptr(rstd), ptr(rm), ptr(rv), 2n, 1e-5, null));
  assert.deepEqual([...mean], [0.5, -1]);
  const f = Math.fround;
  assert.deepEqual([...rstd], [
    f(1 / f(Math.sqrt(f(4 + f(1e-5))))),
    f(1 / f(Math.sqrt(f(0.25 + f(1e-5))))),
  ]);
});

Deno.test("batch-norm kernels refuse bad sizes, momentum, eps and counts", () => {
  const x = new Float32Array(16), acc = new Float64Array(5), mean = new Float32Array(4);
  failsWith(K.dt_bn_sum(ptr(acc), ptr(x), -1n, 4n, 4n, null), "dt_bn_sum: negative size");
  failsWith(
    K.dt_bn_sqdev(ptr(acc), ptr(x), ptr(acc), 1n, 4n, 4n, null),
    "dt_bn_sqdev: the element count 0 must be >= 1",
  );
  acc[4] = 4;
  failsWith(
    K.dt_bn_finalize(
      ptr(mean),
      ptr(mean),
      null,
      null,
      null,
      ptr(acc),
      ptr(acc),
      4n,
      1e-5,
      1.5,
      null,
    ),
    "momentum=1.5 must be in [0, 1]",
  );
  failsWith(
    K.dt_bn_finalize(ptr(mean), ptr(mean), null, null, null, ptr(acc), ptr(acc), 4n, -1, 0.1, null),
    "eps=-1 must be >= 0",
  );
  failsWith(
    K.dt_bn_bwd_apply(
      ptr(x),
      ptr(x),
      ptr(x),
      ptr(mean),
      ptr(mean),
      null,
      ptr(acc),
      null,
      1n,
      4n,
      4n,
      null,
    ),
    "acc needs the element count",
  );
  failsWith(
    K.dt_bn_apply(ptr(x), null, ptr(mean), ptr(mean), null, null, 1n, 4n, 4n, null),
    "dt_bn_apply: null pointer",
  );
});

Deno.test("dt_bn_relu_maxpool2x2_fwd() gives dt_bn_apply, dt_relu_fwd and dt_maxpool2d_fwd's bits", () => {
  const rng = new Rng(11);
  // widths a vector of 8 windows, of 4 and fewer reach; odd sizes leave a row and a column out
  for (
    const [N, C, H, W] of [[2, 3, 6, 20], [3, 2, 9, 13], [1, 4, 4, 5], [2, 2, 7, 34], [1, 1, 2, 2]]
  ) {
    const n = N * C * H * W, OH = Math.floor(H / 2), OW = Math.floor(W / 2), m = N * C * OH * OW;
    const x = Float32Array.from(rng.normals(n), (v) => Math.round(v * 4) / 4); // ties after the affine
    x[3] = NaN;
    x[7] = -0;
    const mean = rng.normals(C, 0.3),
      rstd = Float32Array.from(rng.normals(C), (v) => 0.5 + Math.abs(v));
    const w = rng.normals(C), b = rng.normals(C);
    w[0] = 0; // a channel of zeros: every window ties (and relu(-0) stays -0 where beta is -0)
    for (const affine of [true, false]) {
      const y = new Float32Array(n), r = new Float32Array(n);
      const want = new Float32Array(m), wantIdx = new Int32Array(m);
      const [pw, pb] = affine ? [ptr(w), ptr(b)] : [null, null];
      ok(
        K.dt_bn_apply(
          ptr(y),
          ptr(x),
          ptr(mean),
          ptr(rstd),
          pw,
          pb,
          n64(N),
          n64(C),
          n64(H * W),
          null,
        ),
      );
      ok(K.dt_relu_fwd(ptr(r), ptr(y), n64(n), null));
      const geom = BigInt64Array.from([N * C, H, W, 2, 2, 2, 2, 0, 0, 1, 1, OH, OW].map(BigInt));
      ok(K.dt_maxpool2d_fwd(ptr(want), ptr(wantIdx), ptr(r), geom, null));
      const got = new Float32Array(m).fill(7), idx = new Int32Array(m).fill(-9);
      ok(
        K.dt_bn_relu_maxpool2x2_fwd(
          ptr(got),
          ptr(idx),
          ptr(x),
          ptr(mean),
          ptr(rstd),
          pw,
          pb,
          n64(N),
          n64(C),
          n64(H),
          n64(W),
          null,
        ),
      );
      assertSameBits(got, want, `pooled ${[N, C, H, W]} affine=${affine}`);
      assertSameBits(idx, wantIdx, `indices ${[N, C, H, W]} affine=${affine}`);
    }
  }
  const f = new Float32Array(16), i = new Int32Array(16);
  failsWith(
    K.dt_bn_relu_maxpool2x2_fwd(
      ptr(f),
      ptr(i),
      ptr(f),
      null,
      ptr(f),
      null,
      null,
      1n,
      1n,
      4n,
      4n,
      null,
    ),
    "dt_bn_relu_maxpool2x2_fwd: null pointer",
  );
  failsWith(
    K.dt_bn_relu_maxpool2x2_fwd(
      ptr(f),
      ptr(i),
      ptr(f),
      ptr(f),
      ptr(f),
      null,
      null,
      1n,
      1n,
      1n << 16n,
      1n << 16n,
      null,
    ),
    "must have < 2^31 elements",
  );
  ok(K.dt_bn_relu_maxpool2x2_fwd(null, null, null, null, null, null, null, 2n, 3n, 1n, 9n, null));
});
