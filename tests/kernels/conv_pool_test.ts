/**
 * Tests of the convolution and pooling kernels against index-by-index
 * references: dt_im2col's column matrix and dt_col2im's sums (in (ki, kj)
 * order, so exactly), max pooling with its indices, NaN and padding rules,
 * average pooling with each divisor rule, adaptive windows, the backwards,
 * thread-count invariance and the geometry checks.
 */
import assert from "node:assert/strict";
import { assertSameBits, failsWith, K, n64, ok, ptr, Rng, withThreads } from "./_helpers.ts";

const i64 = (a: number[]) => BigInt64Array.from(a.map(BigInt));
const f = Math.fround;

interface Conv {
  N: number;
  C: number;
  H: number;
  W: number;
  KH: number;
  KW: number;
  SH: number;
  SW: number;
  PH: number;
  PW: number;
  DH: number;
  DW: number;
}
const outSize = (n: number, k: number, s: number, p: number, d: number) =>
  Math.floor((n + 2 * p - d * (k - 1) - 1) / s) + 1;

const CONVS: Conv[] = [
  { N: 2, C: 3, H: 7, W: 6, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1 },
  { N: 1, C: 2, H: 9, W: 8, KH: 3, KW: 2, SH: 2, SW: 3, PH: 1, PW: 0, DH: 2, DW: 1 },
  { N: 3, C: 1, H: 5, W: 5, KH: 1, KW: 1, SH: 1, SW: 1, PH: 0, PW: 0, DH: 1, DW: 1 },
  { N: 2, C: 2, H: 4, W: 10, KH: 5, KW: 3, SH: 1, SW: 2, PH: 3, PW: 2, DH: 1, DW: 3 },
];

function geom(g: Conv): { arr: BigInt64Array<ArrayBuffer>; OH: number; OW: number } {
  const OH = outSize(g.H, g.KH, g.SH, g.PH, g.DH), OW = outSize(g.W, g.KW, g.SW, g.PW, g.DW);
  return {
    arr: i64([g.N, g.C, g.H, g.W, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, g.DH, g.DW, OH, OW]),
    OH,
    OW,
  };
}

Deno.test("dt_im2col() lays out every kernel tap of every output position, 0 in the padding", () => {
  const rng = new Rng(1);
  for (const g of CONVS) {
    const { arr, OH, OW } = geom(g);
    const x = rng.normals(g.N * g.C * g.H * g.W);
    const ld = g.N * OH * OW;
    const col = new Float32Array(g.C * g.KH * g.KW * ld).fill(NaN);
    ok(K.dt_im2col(ptr(col), ptr(x), arr, null));
    for (let c = 0; c < g.C; c++) {
      for (let ki = 0; ki < g.KH; ki++) {
        for (let kj = 0; kj < g.KW; kj++) {
          for (let n = 0; n < g.N; n++) {
            for (let oh = 0; oh < OH; oh++) {
              for (let ow = 0; ow < OW; ow++) {
                const ih = oh * g.SH - g.PH + ki * g.DH, iw = ow * g.SW - g.PW + kj * g.DW;
                const want = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W
                  ? x[((n * g.C + c) * g.H + ih) * g.W + iw]!
                  : 0;
                const got = col[((c * g.KH + ki) * g.KW + kj) * ld + (n * OH + oh) * OW + ow];
                assert.equal(
                  got,
                  want,
                  `${JSON.stringify(g)} c${c} k(${ki},${kj}) n${n} o(${oh},${ow})`,
                );
              }
            }
          }
        }
      }
    }
  }
});

Deno.test("dt_col2im() adds each input's taps in (ki, kj) order, the same on 1 and 2 threads", () => {
  const rng = new Rng(2);
  for (const g of [...CONVS, { ...CONVS[0]!, N: 16, C: 32, H: 28, W: 28 }]) {
    const { arr, OH, OW } = geom(g);
    const ld = g.N * OH * OW;
    const col = rng.normals(g.C * g.KH * g.KW * ld);
    const want = new Float32Array(g.N * g.C * g.H * g.W);
    for (let n = 0; n < g.N; n++) {
      for (let c = 0; c < g.C; c++) {
        for (let ki = 0; ki < g.KH; ki++) {
          for (let kj = 0; kj < g.KW; kj++) {
            for (let oh = 0; oh < OH; oh++) {
              for (let ow = 0; ow < OW; ow++) {
                const ih = oh * g.SH - g.PH + ki * g.DH, iw = ow * g.SW - g.PW + kj * g.DW;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                const k = ((n * g.C + c) * g.H + ih) * g.W + iw;
                want[k] = f(
                  want[k]! + col[((c * g.KH + ki) * g.KW + kj) * ld + (n * OH + oh) * OW + ow]!,
                );
              }
            }
          }
        }
      }
    }
    const run = () => {
      const dx = new Float32Array(want.length).fill(NaN);
      ok(K.dt_col2im(ptr(dx), ptr(col), arr, null));
      return dx;
    };
    const one = withThreads(1, run);
    assertSameBits(one, want, JSON.stringify(g));
    assertSameBits(withThreads(2, run), one, "threads");
  }
});

Deno.test("dt_im2col() and dt_col2im() refuse bad geometry", () => {
  const x = new Float32Array(64);
  const bad = (over: Partial<Conv>) => {
    const g = { ...CONVS[0]!, ...over };
    return i64([g.N, g.C, g.H, g.W, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, g.DH, g.DW, 2, 2]);
  };
  failsWith(
    K.dt_im2col(ptr(x), ptr(x), bad({ SH: 0 }), null),
    "dt_im2col: kernel (3, 3), stride (0, 1)",
  );
  failsWith(K.dt_col2im(ptr(x), ptr(x), bad({ PW: -1 }), null), "dt_col2im: negative padding");
  failsWith(K.dt_im2col(ptr(x), ptr(x), bad({ N: -2 }), null), "negative size");
  failsWith(K.dt_im2col(ptr(x), ptr(x), null, null), "null geometry");
  failsWith(K.dt_im2col(ptr(x), ptr(x), bad({ C: 2 ** 40, H: 2 ** 20 }), null), "sizes overflow");
});

Deno.test("direct convolution kernels refuse too many taps, bad groups and null pointers", () => {
  const x = new Float32Array(64);
  const g = (over: Partial<Conv>) => {
    const c = { ...CONVS[0]!, ...over };
    return i64([c.N, c.C, c.H, c.W, c.KH, c.KW, c.SH, c.SW, c.PH, c.PW, c.DH, c.DW, 2, 2]);
  };
  failsWith(
    K.dt_conv2d_direct_fwd(ptr(x), ptr(x), ptr(x), null, g({ C: 8 }), 4n, 1n, null),
    "dt_conv2d_direct_fwd: 72 taps per output (C/groups x KH x KW) exceed 64",
  );
  failsWith(
    K.dt_conv2d_direct_bwd_weight(ptr(x), null, ptr(x), ptr(x), g({}), 4n, 2n, null),
    "groups=2 must divide C=3",
  );
  failsWith(
    K.dt_conv2d_direct_bwd_input(null, ptr(x), ptr(x), g({}), 4n, 1n, null),
    "dt_conv2d_direct_bwd_input: null pointer",
  );
  failsWith(
    K.dt_conv2d_direct_fwd(ptr(x), ptr(x), ptr(x), null, g({ DW: 0 }), 4n, 1n, null),
    "must be >= 1",
  );
});

// ---- pooling -------------------------------------------------------------------

interface Pool {
  P: number;
  H: number;
  W: number;
  KH: number;
  KW: number;
  SH: number;
  SW: number;
  PH: number;
  PW: number;
  DH: number;
  DW: number;
  OH: number;
  OW: number;
}
const poolArr = (g: Pool) =>
  i64([g.P, g.H, g.W, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, g.DH, g.DW, g.OH, g.OW]);

const POOLS: Pool[] = [
  { P: 3, H: 6, W: 6, KH: 2, KW: 2, SH: 2, SW: 2, PH: 0, PW: 0, DH: 1, DW: 1, OH: 3, OW: 3 },
  { P: 2, H: 7, W: 8, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 5 }, // ceil mode
  { P: 2, H: 9, W: 7, KH: 3, KW: 2, SH: 1, SW: 2, PH: 1, PW: 0, DH: 2, DW: 1, OH: 7, OW: 3 },
  { P: 4, H: 5, W: 5, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 5, OW: 5 },
];

/** Windows wholly inside the plane take a separate, vectorised path: cover it with dilation and strides. */
const INSIDE_POOLS: Pool[] = [
  { P: 3, H: 9, W: 7, KH: 3, KW: 2, SH: 1, SW: 2, PH: 0, PW: 0, DH: 2, DW: 1, OH: 5, OW: 3 },
  { P: 2, H: 8, W: 11, KH: 2, KW: 3, SH: 3, SW: 1, PH: 0, PW: 0, DH: 1, DW: 2, OH: 3, OW: 7 },
  { P: 3, H: 7, W: 9, KH: 2, KW: 2, SH: 2, SW: 2, PH: 0, PW: 0, DH: 1, DW: 1, OH: 3, OW: 4 }, // odd: a last row and column in no window
  // 2x2 windows a vector at a time: 4 lanes (OW 4..7), 8 lanes with a last vector that overlaps
  { P: 3, H: 14, W: 15, KH: 2, KW: 2, SH: 2, SW: 2, PH: 0, PW: 0, DH: 1, DW: 1, OH: 7, OW: 7 },
  { P: 2, H: 6, W: 10, KH: 2, KW: 2, SH: 2, SW: 2, PH: 0, PW: 0, DH: 1, DW: 1, OH: 3, OW: 5 },
  { P: 3, H: 28, W: 28, KH: 2, KW: 2, SH: 2, SW: 2, PH: 0, PW: 0, DH: 1, DW: 1, OH: 14, OW: 14 },
  { P: 2, H: 9, W: 34, KH: 2, KW: 2, SH: 2, SW: 2, PH: 0, PW: 0, DH: 1, DW: 1, OH: 4, OW: 17 },
];

Deno.test("dt_maxpool2d_fwd/bwd() follow torch's window, NaN and index rules", () => {
  const rng = new Rng(3);
  for (const g of [...POOLS, ...INSIDE_POOLS]) {
    const x = Float32Array.from(rng.normals(g.P * g.H * g.W), (v) => Math.round(v * 2) / 2);
    x[5] = NaN;
    x[g.H * g.W + 1] = -Infinity;
    x.fill(-Infinity, 2 * g.H * g.W, 2 * g.H * g.W + 2 * g.W + 3); // windows of -inf only
    const n = g.P * g.OH * g.OW;
    const out = new Float32Array(n).fill(7), idx = new Int32Array(n).fill(-9);
    ok(K.dt_maxpool2d_fwd(ptr(out), ptr(idx), ptr(x), poolArr(g), null));
    const dy = rng.normals(n), dx = new Float32Array(g.P * g.H * g.W);
    for (let p = 0; p < g.P; p++) {
      for (let oh = 0; oh < g.OH; oh++) {
        for (let ow = 0; ow < g.OW; ow++) {
          let h0 = oh * g.SH - g.PH, w0 = ow * g.SW - g.PW;
          const h1 = Math.min(h0 + (g.KH - 1) * g.DH + 1, g.H),
            w1 = Math.min(w0 + (g.KW - 1) * g.DW + 1, g.W);
          while (h0 < 0) h0 += g.DH;
          while (w0 < 0) w0 += g.DW;
          let best = -Infinity, at = h0 * g.W + w0;
          for (let ih = h0; ih < h1; ih += g.DH) {
            for (let iw = w0; iw < w1; iw += g.DW) {
              const v = x[p * g.H * g.W + ih * g.W + iw]!;
              if (v > best || Number.isNaN(v)) [best, at] = [v, ih * g.W + iw];
            }
          }
          const k = (p * g.OH + oh) * g.OW + ow;
          assert.ok(Object.is(out[k], best), `${JSON.stringify(g)} out ${k}: ${out[k]} vs ${best}`);
          assert.equal(idx[k], at, `${JSON.stringify(g)} idx ${k}`);
          dx[p * g.H * g.W + at] = f(dx[p * g.H * g.W + at]! + dy[k]!);
        }
      }
    }
    const got = new Float32Array(dx.length).fill(NaN);
    ok(K.dt_maxpool2d_bwd(ptr(got), ptr(dy), ptr(idx), poolArr(g), null));
    assertSameBits(got, dx, `bwd ${JSON.stringify(g)}`);
  }
});

/** torch's avg_pool2d window of output (oh, ow): clipped bounds and divisor. */
function avgWindow(g: Pool, oh: number, ow: number, includePad: boolean, override: number) {
  let h0 = oh * g.SH - g.PH, w0 = ow * g.SW - g.PW;
  let h1 = Math.min(h0 + g.KH, g.H + g.PH), w1 = Math.min(w0 + g.KW, g.W + g.PW);
  const pool = (h1 - h0) * (w1 - w0);
  h0 = Math.max(h0, 0), w0 = Math.max(w0, 0), h1 = Math.min(h1, g.H), w1 = Math.min(w1, g.W);
  return {
    h0,
    h1,
    w0,
    w1,
    div: override > 0 ? override : includePad ? pool : (h1 - h0) * (w1 - w0),
  };
}

Deno.test("dt_avgpool2d_fwd/bwd() divide by torch's divisor: padded window, valid window or an override", () => {
  const rng = new Rng(4);
  for (const g0 of POOLS) {
    const g = { ...g0, DH: 1, DW: 1, OH: g0 === POOLS[2] ? 9 : g0.OH };
    for (const [includePad, override] of [[true, 0], [false, 0], [true, 5]] as const) {
      const x = rng.normals(g.P * g.H * g.W), n = g.P * g.OH * g.OW, dy = rng.normals(n);
      const out = new Float32Array(n).fill(NaN);
      ok(
        K.dt_avgpool2d_fwd(
          ptr(out),
          ptr(x),
          poolArr(g),
          includePad ? 1 : 0,
          BigInt(override),
          null,
        ),
      );
      const want = new Float32Array(n), dx = new Float32Array(x.length);
      for (let p = 0; p < g.P; p++) {
        for (let oh = 0; oh < g.OH; oh++) {
          for (let ow = 0; ow < g.OW; ow++) {
            const w = avgWindow(g, oh, ow, includePad, override), k = (p * g.OH + oh) * g.OW + ow;
            let sum = 0;
            for (let ih = w.h0; ih < w.h1; ih++) {
              for (let iw = w.w0; iw < w.w1; iw++) sum = f(sum + x[p * g.H * g.W + ih * g.W + iw]!);
            }
            want[k] = w.h0 >= w.h1 || w.w0 >= w.w1 ? 0 : f(sum / w.div);
            const delta = f(dy[k]! / w.div);
            for (let ih = w.h0; ih < w.h1; ih++) {
              for (let iw = w.w0; iw < w.w1; iw++) {
                const q = p * g.H * g.W + ih * g.W + iw;
                dx[q] = f(dx[q]! + delta);
              }
            }
          }
        }
      }
      const what = `${JSON.stringify(g)} pad=${includePad} div=${override}`;
      assertSameBits(out, want, what);
      const got = new Float32Array(x.length).fill(NaN);
      ok(
        K.dt_avgpool2d_bwd(
          ptr(got),
          ptr(dy),
          poolArr(g),
          includePad ? 1 : 0,
          BigInt(override),
          null,
        ),
      );
      assertSameBits(got, dx, `bwd ${what}`);
    }
  }
});

Deno.test("dt_adaptive_avgpool2d_fwd/bwd() average torch's adaptive windows", () => {
  const rng = new Rng(5);
  for (
    const [P, H, W, OH, OW] of [
      [2, 8, 8, 1, 1],
      [3, 7, 9, 3, 4],
      [1, 5, 5, 5, 5],
      [2, 6, 10, 4, 3],
      [1, 3, 3, 5, 7],
    ]
  ) {
    const x = rng.normals(P * H * W), n = P * OH * OW, dy = rng.normals(n);
    const out = new Float32Array(n).fill(NaN);
    ok(
      K.dt_adaptive_avgpool2d_fwd(ptr(out), ptr(x), n64(P), n64(H), n64(W), n64(OH), n64(OW), null),
    );
    const start = (o: number, on: number, len: number) => Math.floor((o * len) / on);
    const end = (o: number, on: number, len: number) => Math.ceil(((o + 1) * len) / on);
    const want = new Float32Array(n), dx = new Float32Array(x.length);
    for (let p = 0; p < P; p++) {
      for (let oh = 0; oh < OH; oh++) {
        for (let ow = 0; ow < OW; ow++) {
          const h0 = start(oh, OH, H),
            h1 = end(oh, OH, H),
            w0 = start(ow, OW, W),
            w1 = end(ow, OW, W);
          let sum = 0;
          for (let ih = h0; ih < h1; ih++) {
            for (let iw = w0; iw < w1; iw++) sum = f(sum + x[(p * H + ih) * W + iw]!);
          }
          const k = (p * OH + oh) * OW + ow;
          want[k] = f(f(sum / (h1 - h0)) / (w1 - w0));
          const delta = f(f(dy[k]! / (h1 - h0)) / (w1 - w0));
          for (let ih = h0; ih < h1; ih++) {
            for (let iw = w0; iw < w1; iw++) {
              dx[(p * H + ih) * W + iw] = f(dx[(p * H + ih) * W + iw]! + delta);
            }
          }
        }
      }
    }
    assertSameBits(out, want, `[${P}, ${H}, ${W}] -> [${OH}, ${OW}]`);
    const got = new Float32Array(x.length).fill(NaN);
    ok(
      K.dt_adaptive_avgpool2d_bwd(
        ptr(got),
        ptr(dy),
        n64(P),
        n64(H),
        n64(W),
        n64(OH),
        n64(OW),
        null,
      ),
    );
    assertSameBits(got, dx, `bwd [${P}, ${H}, ${W}] -> [${OH}, ${OW}]`);
  }
});

Deno.test("pooling kernels refuse bad geometry and stale indices", () => {
  const x = new Float32Array(64), idx = new Int32Array(16);
  const g = POOLS[0]!;
  failsWith(
    K.dt_maxpool2d_fwd(ptr(x), ptr(idx), ptr(x), poolArr({ ...g, PH: 2 }), null),
    "padding (2, 0) must be in [0, kernel / 2]",
  );
  failsWith(
    K.dt_avgpool2d_fwd(ptr(x), ptr(x), poolArr({ ...g, DH: 2 }), 1, 0n, null),
    "dilation (2, 1) must be 1",
  );
  failsWith(K.dt_avgpool2d_fwd(ptr(x), ptr(x), poolArr(g), 1, -3n, null), "divisor_override=-3");
  failsWith(
    K.dt_maxpool2d_fwd(ptr(x), ptr(idx), ptr(x), poolArr({ ...g, KW: 0 }), null),
    "must be >= 1",
  );
  idx.fill(0);
  idx[3] = 36;
  failsWith(
    K.dt_maxpool2d_bwd(ptr(x), ptr(x), ptr(idx), poolArr({ ...g, P: 1 }), null),
    "index 36 at position 3",
  );
  failsWith(
    K.dt_adaptive_avgpool2d_fwd(ptr(x), ptr(x), 1n, 4n, 4n, 0n, 2n, null),
    "output size (0, 2)",
  );
});
