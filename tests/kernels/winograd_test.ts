/**
 * Tests of the Winograd F(2x2, 3x3) kernels: each transform against its
 * matrix form in f64 (G g G^T, B^T d B, A^T m A and the adjoints), the
 * adjoint identities <T x, y> = <x, T* y>, a whole convolution through the
 * transforms and dt_gemm against a direct f64 sum (odd sizes, any padding),
 * blocks of tiles that split rows and images giving the single block's bits,
 * thread-count invariance and the argument checks.
 */
import assert from "node:assert/strict";
import {
  assertClose,
  assertSameBits,
  failsWith,
  K,
  n64,
  ok,
  ptr,
  Rng,
  withThreads,
} from "./_helpers.ts";

const i64 = (a: number[]) => BigInt64Array.from(a.map(BigInt));
const G = [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]];
const BT = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]];
const AT = [[1, 1, 1, 0], [0, 1, -1, -1]];

/** L (r x k) @ X (k x k') @ R^T (k' x c) in f64, X row-major. */
function sandwich(L: number[][], X: ArrayLike<number>, R: number[][]): number[] {
  const r = L.length, k = L[0]!.length, c = R.length, k2 = R[0]!.length, out: number[] = [];
  for (let i = 0; i < r; i++) {
    for (let j = 0; j < c; j++) {
      let s = 0;
      for (let a = 0; a < k; a++) {
        for (let b = 0; b < k2; b++) s += L[i]![a]! * X[a * k2 + b]! * R[j]![b]!;
      }
      out.push(s);
    }
  }
  return out;
}
const transpose = (M: number[][]) => M[0]!.map((_, j) => M.map((row) => row[j]!));
const maxAbs = (a: ArrayLike<number>) => Math.max(1e-30, ...Array.from(a, Math.abs));

interface Shape {
  N: number;
  C: number;
  H: number;
  W: number;
  Cout: number;
  PH: number;
  PW: number;
}
const SHAPES: Shape[] = [
  { N: 2, C: 3, H: 6, W: 5, Cout: 4, PH: 1, PW: 1 },
  { N: 1, C: 2, H: 7, W: 9, Cout: 3, PH: 0, PW: 2 },
  { N: 3, C: 1, H: 3, W: 3, Cout: 2, PH: 2, PW: 0 },
  { N: 2, C: 4, H: 1, W: 4, Cout: 1, PH: 1, PW: 1 },
];

function grid(s: Shape) {
  const OH = Math.max(0, s.H + 2 * s.PH - 2), OW = Math.max(0, s.W + 2 * s.PW - 2);
  const TH = Math.ceil(OH / 2), TW = Math.ceil(OW / 2);
  const geom = i64([s.N, s.C, s.H, s.W, 3, 3, 1, 1, s.PH, s.PW, 1, 1, OH, OW]);
  return { OH, OW, TH, TW, T: s.N * TH * TW, geom };
}

Deno.test("dt_winograd_weight() and _weight_grad() are G g G^T and G^T m G", () => {
  const rng = new Rng(1);
  const [Cout, C] = [3, 5], pairs = Cout * C;
  const w = rng.normals(pairs * 9), u = new Float32Array(16 * pairs);
  ok(K.dt_winograd_weight(ptr(u), ptr(w), n64(Cout), n64(C), null));
  const m = rng.normals(16 * pairs), dw = new Float32Array(pairs * 9);
  ok(K.dt_winograd_weight_grad(ptr(dw), ptr(m), n64(Cout), n64(C), null));
  for (let k = 0; k < pairs; k++) {
    // each value sums a few inputs: a few ulps of the largest input
    const wk = w.subarray(9 * k, 9 * k + 9), want = sandwich(G, wk, G);
    const got = want.map((_, xi) => u[xi * pairs + k]!);
    assertClose(got, want, 1e-6, `U of pair ${k}`, maxAbs(wk));
    const mk = Array.from({ length: 16 }, (_, xi) => m[xi * pairs + k]!);
    const wantDw = sandwich(transpose(G), mk, transpose(G));
    assertClose(dw.subarray(9 * k, 9 * k + 9), wantDw, 1e-6, `dW of pair ${k}`, maxAbs(mk));
  }
});

/** The four tile transforms of one shape, every tile in one call. */
function transforms(s: Shape, rng: Rng) {
  const g = grid(s);
  const x = rng.normals(s.N * s.C * s.H * s.W), dy = rng.normals(s.N * s.Cout * g.OH * g.OW);
  const T = n64(g.T);
  const v = new Float32Array(16 * s.C * g.T), p = new Float32Array(16 * s.Cout * g.T);
  ok(K.dt_winograd_input(ptr(v), ptr(x), g.geom, 0n, T, T, null));
  ok(K.dt_winograd_output_grad(ptr(p), ptr(dy), g.geom, n64(s.Cout), 0n, T, T, null));
  const m = rng.normals(16 * s.Cout * g.T), dv = rng.normals(16 * s.C * g.T);
  const y = new Float32Array(dy.length), dx = new Float32Array(x.length);
  ok(K.dt_winograd_output(ptr(y), ptr(m), null, g.geom, n64(s.Cout), 0n, T, T, null));
  ok(K.dt_winograd_input_grad(ptr(dx), ptr(dv), g.geom, 0n, T, T, null));
  return { g, x, dy, v, p, m, dv, y, dx };
}

Deno.test("dt_winograd_input() and _output() transform each tile as B^T d B and A^T m A", () => {
  const rng = new Rng(2);
  for (const s of SHAPES) {
    const { g, x, v, m, y } = transforms(s, rng);
    for (let t = 0; t < g.T; t++) {
      const n = Math.floor(t / (g.TH * g.TW)), ty = Math.floor(t / g.TW) % g.TH, tx = t % g.TW;
      for (let c = 0; c < s.C; c++) {
        const d = Array.from({ length: 16 }, (_, e) => {
          const r = 2 * ty - s.PH + (e >> 2), col = 2 * tx - s.PW + (e & 3);
          return r >= 0 && r < s.H && col >= 0 && col < s.W
            ? x[((n * s.C + c) * s.H + r) * s.W + col]!
            : 0;
        });
        const want = sandwich(BT, d, BT);
        const got = want.map((_, xi) => v[(xi * s.C + c) * g.T + t]!);
        assertClose(got, want, 1e-6, `V of tile ${t}, channel ${c}`, maxAbs(d));
      }
      for (let co = 0; co < s.Cout; co++) {
        const mt = Array.from({ length: 16 }, (_, xi) => m[(xi * s.Cout + co) * g.T + t]!);
        const want = sandwich(AT, mt, AT);
        for (let e = 0; e < 4; e++) {
          const r = 2 * ty + (e >> 1), col = 2 * tx + (e & 1);
          if (r >= g.OH || col >= g.OW) continue; // outputs past the edge are not written
          const got = y[((n * s.Cout + co) * g.OH + r) * g.OW + col]!;
          assertClose([got], [want[e]!], 1e-6, `Y of tile ${t}`, maxAbs(mt));
        }
      }
    }
  }
});

Deno.test("the gradient transforms are the adjoints: <T x, y> = <x, T* y>", () => {
  const rng = new Rng(3);
  const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => {
    let s = 0;
    for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
    return s;
  };
  const close = (a: number, b: number, what: string) =>
    assert.ok(Math.abs(a - b) <= 1e-5 * (Math.abs(a) + Math.abs(b) + 1), `${what}: ${a} vs ${b}`);
  for (const s of SHAPES) {
    const { x, dy, v, p, m, dv, y, dx } = transforms(s, rng);
    close(dot(v, dv), dot(x, dx), `input transform, ${JSON.stringify(s)}`);
    close(dot(m, p), dot(y, dy), `output transform, ${JSON.stringify(s)}`);
  }
  const [Cout, C] = [2, 3], w = rng.normals(Cout * C * 9), mm = rng.normals(16 * Cout * C);
  const u = new Float32Array(16 * Cout * C), dw = new Float32Array(Cout * C * 9);
  ok(K.dt_winograd_weight(ptr(u), ptr(w), n64(Cout), n64(C), null));
  ok(K.dt_winograd_weight_grad(ptr(dw), ptr(mm), n64(Cout), n64(C), null));
  close(dot(u, mm), dot(w, dw), "kernel transform");
});

/** out (N, Cout, OH, OW) of a 3x3 stride-1 convolution, in f64. */
function directConv(s: Shape, x: Float32Array, w: Float32Array, b: Float32Array): Float64Array {
  const { OH, OW } = grid(s), out = new Float64Array(s.N * s.Cout * OH * OW);
  for (let n = 0; n < s.N; n++) {
    for (let co = 0; co < s.Cout; co++) {
      for (let oh = 0; oh < OH; oh++) {
        for (let ow = 0; ow < OW; ow++) {
          let acc = b[co]!;
          for (let c = 0; c < s.C; c++) {
            for (let ki = 0; ki < 3; ki++) {
              for (let kj = 0; kj < 3; kj++) {
                const ih = oh - s.PH + ki, iw = ow - s.PW + kj;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                acc += w[((co * s.C + c) * 3 + ki) * 3 + kj]! *
                  x[((n * s.C + c) * s.H + ih) * s.W + iw]!;
              }
            }
          }
          out[((n * s.Cout + co) * OH + oh) * OW + ow] = acc;
        }
      }
    }
  }
  return out;
}

/** The convolution through the kernels, in blocks of `block` tiles. */
function winogradConv(
  s: Shape,
  x: Float32Array<ArrayBuffer>,
  w: Float32Array<ArrayBuffer>,
  b: Float32Array<ArrayBuffer>,
  block: number,
): Float32Array {
  const g = grid(s);
  const u = new Float32Array(16 * s.Cout * s.C);
  ok(K.dt_winograd_weight(ptr(u), ptr(w), n64(s.Cout), n64(s.C), null));
  const y = new Float32Array(s.N * s.Cout * g.OH * g.OW).fill(NaN);
  const v = new Float32Array(16 * s.C * block), m = new Float32Array(16 * s.Cout * block);
  for (let t0 = 0; t0 < g.T; t0 += block) {
    const nt = Math.min(block, g.T - t0);
    ok(K.dt_winograd_input(ptr(v), ptr(x), g.geom, n64(t0), n64(nt), n64(block), null));
    ok(
      K.dt_gemm(
        0,
        0,
        0,
        n64(s.Cout),
        n64(nt),
        n64(s.C),
        1,
        ptr(u),
        n64(s.C),
        ptr(v),
        n64(block),
        0,
        ptr(m),
        n64(block),
        16n,
        n64(s.Cout * s.C),
        n64(s.C * block),
        n64(s.Cout * block),
        null,
      ),
    );
    ok(
      K.dt_winograd_output(
        ptr(y),
        ptr(m),
        ptr(b),
        g.geom,
        n64(s.Cout),
        n64(t0),
        n64(nt),
        n64(block),
        null,
      ),
    );
  }
  return y;
}

Deno.test("a convolution through the transforms and dt_gemm matches the direct f64 sum", () => {
  const rng = new Rng(4);
  for (const s of [...SHAPES, { N: 2, C: 16, H: 11, W: 14, Cout: 9, PH: 1, PW: 1 }]) {
    const x = rng.normals(s.N * s.C * s.H * s.W),
      w = rng.normals(s.Cout * s.C * 9),
      b = rng.normals(s.Cout);
    const want = directConv(s, x, w, b);
    const scale = Math.max(1, ...want.map(Math.abs));
    const got = winogradConv(s, x, w, b, 1 << 20);
    // an f32 sum of 9·C products: a few ulps of the largest output
    const err = Math.max(0, ...got.map((v, i) => Math.abs(v - want[i]!)));
    assert.ok(
      err <= 1e-6 * scale * Math.sqrt(9 * s.C),
      `${JSON.stringify(s)}: error ${err}, scale ${scale}`,
    );
  }
});

Deno.test("blocks of tiles (splitting rows and images, ld > nt) give one call's bits", () => {
  const rng = new Rng(5);
  for (const s of SHAPES) {
    const { g, x, dy, v, p, m, dv, y, dx } = transforms(s, rng);
    const T = n64(g.T),
      at = (a: Float32Array<ArrayBuffer>, t0: number) => Deno.UnsafePointer.offset(ptr(a)!, t0 * 4);
    for (const block of [1, 3, 5]) {
      const vb = new Float32Array(v.length), pb = new Float32Array(p.length);
      const yb = new Float32Array(y.length), dxb = new Float32Array(dx.length);
      for (let t0 = 0; t0 < g.T; t0 += block) {
        const [bt0, nt] = [n64(t0), n64(Math.min(block, g.T - t0))];
        ok(K.dt_winograd_input(at(vb, t0), ptr(x), g.geom, bt0, nt, T, null));
        ok(K.dt_winograd_output_grad(at(pb, t0), ptr(dy), g.geom, n64(s.Cout), bt0, nt, T, null));
        ok(K.dt_winograd_output(ptr(yb), at(m, t0), null, g.geom, n64(s.Cout), bt0, nt, T, null));
        // the input gradient adds block after block, in tile order
        ok(K.dt_winograd_input_grad(ptr(dxb), at(dv, t0), g.geom, bt0, nt, T, null));
      }
      const what = `blocks of ${block}, ${JSON.stringify(s)}`;
      assertSameBits(vb, v, `input transform, ${what}`);
      assertSameBits(pb, p, `output gradient transform, ${what}`);
      assertSameBits(yb, y, `output transform, ${what}`);
      assertSameBits(dxb, dx, `input gradient, ${what}`);
    }
  }
});

Deno.test("the transforms give the same bits on any thread count", () => {
  const s: Shape = { N: 4, C: 12, H: 17, W: 10, Cout: 7, PH: 1, PW: 1 };
  const run = () => transforms(s, new Rng(7));
  const a = withThreads(1, run), c = withThreads(4, run);
  for (const k of ["v", "p", "y", "dx"] as const) assertSameBits(c[k], a[k], k);
});

Deno.test("the Winograd kernels refuse what they cannot compute, naming it", () => {
  const x = new Float32Array(64),
    geom = (o: Partial<Record<string, number>> = {}) =>
      i64([1, 2, 4, 4, o.KH ?? 3, 3, o.SH ?? 1, 1, 1, 1, o.DH ?? 1, 1, o.OH ?? 4, 4]);
  failsWith(
    K.dt_winograd_input(ptr(x), ptr(x), geom({ KH: 5 }), 0n, 1n, 1n, null),
    "needs a 3x3 kernel",
  );
  failsWith(K.dt_winograd_input(ptr(x), ptr(x), geom({ SH: 2 }), 0n, 1n, 1n, null), "at stride 1");
  failsWith(K.dt_winograd_input(ptr(x), ptr(x), geom({ DH: 2 }), 0n, 1n, 1n, null), "dilation 1");
  failsWith(
    K.dt_winograd_input(ptr(x), ptr(x), geom({ OH: 3 }), 0n, 1n, 1n, null),
    "output 3x4 does not match input 4x4 padded by (1, 1)",
  );
  failsWith(
    K.dt_winograd_input(ptr(x), ptr(x), geom(), 2n, 3n, 3n, null),
    "tiles [2, 2 + 3) are not within the 4 tiles of the output",
  );
  failsWith(
    K.dt_winograd_output(ptr(x), ptr(x), null, geom(), 2n, 0n, 4n, 3n, null),
    "ld=3 must be >= max(nt=4, 1)",
  );
  failsWith(K.dt_winograd_output_grad(ptr(x), null, geom(), 2n, 0n, 4n, 4n, null), "null pointer");
  failsWith(K.dt_winograd_input_grad(ptr(x), ptr(x), null, 0n, 1n, 1n, null), "null geometry");
  failsWith(K.dt_winograd_weight(null, ptr(x), 2n, 3n, null), "dt_winograd_weight: null pointer");
  failsWith(K.dt_winograd_weight_grad(ptr(x), ptr(x), -1n, 3n, null), "negative size");
  // empty calls are fine with null data
  ok(K.dt_winograd_input(null, null, geom(), 4n, 0n, 1n, null));
  ok(K.dt_winograd_weight(null, null, 0n, 3n, null));
});
