/**
 * Tests of dt_unary_fwd/bwd (exp, log, sigmoid, tanh, sqrt, pow, clamp) and
 * dt_where against float64 references: transcendental results within a few
 * ulps (dt_logf within 1 ulp over every binade, subnormals included), IEEE
 * special values, torch's pow special cases, the same bits on any thread
 * count, and the argument checks.
 */
import assert from "node:assert/strict";
import { assertSameBits, failsWith, K, n64, ok, ptr, Rng, withThreads } from "./_helpers.ts";

const OP = { exp: 0, log: 1, sigmoid: 2, tanh: 3, sqrt: 4, pow: 5, clamp: 6 } as const;

function fwd(op: number, x: Float32Array<ArrayBuffer>, a = 0, b = 0): Float32Array<ArrayBuffer> {
  const out = new Float32Array(x.length).fill(NaN);
  ok(K.dt_unary_fwd(op, ptr(out), ptr(x), n64(x.length), a, b, null));
  return out;
}

/** Distance in units in the last place of the float32 expected value. */
function ulps(got: number, want: number): number {
  if (Number.isNaN(got) || Number.isNaN(want)) {
    return Number.isNaN(got) === Number.isNaN(want) ? 0 : Infinity;
  }
  if (got === want) return 0;
  const w = Math.fround(want);
  const exp = Math.max(Math.floor(Math.log2(Math.abs(w || 1e-45))), -126);
  return Math.abs(got - want) / 2 ** (exp - 23);
}

function maxUlps(
  got: Float32Array,
  ref: (x: number) => number,
  x: Float32Array,
): { err: number; at: number } {
  let err = 0, at = -1;
  for (let i = 0; i < x.length; i++) {
    const e = ulps(got[i]!, ref(x[i]!));
    if (e > err) [err, at] = [e, i];
  }
  return { err, at };
}

function assertUlps(
  got: Float32Array,
  ref: (x: number) => number,
  x: Float32Array,
  limit: number,
  what: string,
) {
  const { err, at } = maxUlps(got, ref, x);
  assert.ok(
    err <= limit,
    `${what}: ${err.toFixed(2)} ulps at x=${x[at]}: got ${got[at]}, expected ${ref(x[at]!)}`,
  );
}

/** Floats spread over every binade of [lo, hi] (positive), plus subnormals when lo is tiny. */
function binades(lo: number, hi: number, perBinade: number, rng: Rng): Float32Array<ArrayBuffer> {
  const out: number[] = [];
  for (let e = Math.floor(Math.log2(lo)); e <= Math.ceil(Math.log2(hi)); e++) {
    for (let k = 0; k < perBinade; k++) out.push(Math.fround(2 ** e * (1 + rng.next())));
  }
  return Float32Array.from(out.filter((v) => v >= lo && v <= hi));
}

Deno.test("dt_unary_fwd(log) is within 1 ulp over every binade, subnormals included, with IEEE specials", () => {
  const rng = new Rng(1);
  const x = binades(2 ** -149, 3.4e38, 200, rng);
  assertUlps(fwd(OP.log, x), Math.log, x, 1, "log");
  const near1 = Float32Array.from({ length: 4000 }, () => Math.fround(0.5 + rng.next()));
  assertUlps(fwd(OP.log, near1), Math.log, near1, 1, "log near 1");
  const special = Float32Array.of(0, -0, -1, Infinity, -Infinity, NaN, 1);
  assertSameBits(
    fwd(OP.log, special),
    [-Infinity, -Infinity, NaN, Infinity, NaN, NaN, 0],
    "log specials",
  );
});

Deno.test("dt_unary_fwd(exp, sigmoid, tanh, sqrt) match float64 within 1-2 ulps", () => {
  const rng = new Rng(2);
  const x = rng.normals(20000, 8);
  assertUlps(fwd(OP.exp, x), Math.exp, x, 1, "exp");
  assertUlps(fwd(OP.sigmoid, x), (v) => 1 / (1 + Math.exp(-v)), x, 2, "sigmoid");
  assertUlps(fwd(OP.tanh, x), Math.tanh, x, 2, "tanh");
  const pos = binades(2 ** -149, 3.4e38, 50, rng);
  assertSameBits(
    fwd(OP.sqrt, pos),
    Array.from(pos, (v) => Math.fround(Math.sqrt(v))),
    "sqrt is IEEE",
  );
  assertSameBits(
    fwd(OP.sigmoid, Float32Array.of(-200, 200, NaN, 0)),
    [0, 1, NaN, 0.5],
    "sigmoid saturates",
  );
  assertSameBits(
    fwd(OP.exp, Float32Array.of(-200, 100, NaN, 0)),
    [0, Infinity, NaN, 1],
    "exp specials",
  );
});

Deno.test("dt_unary_fwd(pow) takes torch's special exponents exactly and powf otherwise", () => {
  const rng = new Rng(3);
  const x = Float32Array.from({ length: 1000 }, () => Math.fround(0.1 + 3 * rng.next()));
  const f = Math.fround;
  const cases: [number, (v: number) => number][] = [
    [2, (v) => f(v * v)],
    [3, (v) => f(f(v * v) * v)],
    [0.5, (v) => f(Math.sqrt(v))],
    [-0.5, (v) => f(1 / f(Math.sqrt(v)))],
    [-1, (v) => f(1 / v)],
    [-2, (v) => f(1 / f(v * v))],
    [1, (v) => v],
    [0, () => 1],
  ];
  for (const [p, ref] of cases) assertSameBits(fwd(OP.pow, x, p), Array.from(x, ref), `pow ${p}`);
  assertUlps(fwd(OP.pow, x, 1.7), (v) => v ** Math.fround(1.7), x, 1, "pow 1.7");
});

Deno.test("dt_unary_fwd(clamp) bounds each side, keeps NaN, and treats infinite bounds as none", () => {
  const x = Float32Array.of(-2, -0.5, 0, 0.5, 2, NaN);
  assertSameBits(fwd(OP.clamp, x, -1, 1), [-1, -0.5, 0, 0.5, 1, NaN], "clamp both");
  assertSameBits(
    fwd(OP.clamp, x, -Infinity, 0.25),
    [-2, -0.5, 0, 0.25, 0.25, NaN],
    "clamp max only",
  );
  assertSameBits(fwd(OP.clamp, x, 0, Infinity), [0, 0, 0, 0.5, 2, NaN], "clamp min only");
});

Deno.test("dt_unary_bwd() applies each derivative to dout, from the forward's input and output", () => {
  const rng = new Rng(4);
  const n = 5000;
  const x = rng.normals(n, 2), dout = rng.normals(n);
  const xp = Float32Array.from(x, (v) => Math.fround(Math.abs(v) + 0.1));
  const cases: [
    keyof typeof OP,
    Float32Array<ArrayBuffer>,
    number,
    number,
    (x: number, y: number) => number,
  ][] = [
    ["exp", x, 0, 0, (_x, y) => y],
    ["log", xp, 0, 0, (v) => 1 / v],
    ["sigmoid", x, 0, 0, (_x, y) => (1 - y) * y],
    ["tanh", x, 0, 0, (_x, y) => 1 - y * y],
    ["sqrt", xp, 0, 0, (_x, y) => 1 / (2 * y)],
    ["pow", xp, 2.5, 0, (v) => 2.5 * v ** 1.5],
    ["clamp", x, -0.5, 0.7, (v) => (v >= -0.5 && v <= 0.7 ? 1 : 0)],
  ];
  for (const [name, xin, a, b, deriv] of cases) {
    const y = fwd(OP[name], xin, a, b);
    const dinp = new Float32Array(n).fill(NaN);
    ok(K.dt_unary_bwd(OP[name], ptr(dinp), ptr(dout), ptr(xin), ptr(y), n64(n), a, b, null));
    for (let i = 0; i < n; i++) {
      const want = dout[i]! * deriv(xin[i]!, y[i]!);
      const tolAbs = 8 * 2 ** -24 * Math.abs(dout[i]!) * (Math.abs(want / (dout[i]! || 1)) + 1);
      assert.ok(
        Math.abs(dinp[i]! - want) <= tolAbs,
        `${name} backward at x=${xin[i]}: got ${dinp[i]}, expected ${want}`,
      );
    }
  }
  const zero = new Float32Array(4);
  ok(K.dt_unary_bwd(OP.pow, ptr(zero), ptr(dout), ptr(xp), ptr(xp), 4n, 0, 0, null));
  assertSameBits(zero, [0, 0, 0, 0], "pow with exponent 0 has gradient 0");
});

Deno.test("dt_unary_fwd() gives the same bits on 1 and 2 threads", () => {
  const x = new Rng(5).normals(300_001, 3);
  for (const op of [OP.exp, OP.tanh, OP.sigmoid]) {
    const one = withThreads(1, () => fwd(op, x));
    const two = withThreads(2, () => fwd(op, x));
    assertSameBits(two, one, `op ${op}`);
  }
});

Deno.test("dt_where() picks a or b per element, with scalar stand-ins for either side", () => {
  const cond = Uint8Array.of(1, 0, 2, 0),
    a = Float32Array.of(1, 2, 3, 4),
    b = Float32Array.of(5, 6, 7, 8);
  const out = new Float32Array(4);
  ok(K.dt_where(ptr(out), ptr(cond), ptr(a), ptr(b), 4n, 0, 0, null));
  assertSameBits(out, [1, 6, 3, 8], "tensors");
  ok(K.dt_where(ptr(out), ptr(cond), null, ptr(b), 4n, -Infinity, 0, null));
  assertSameBits(out, [-Infinity, 6, -Infinity, 8], "masked fill");
  ok(K.dt_where(ptr(out), ptr(cond), ptr(a), null, 4n, 0, 0, null));
  assertSameBits(out, [1, 0, 3, 0], "b scalar");
});

Deno.test("unary kernels refuse unknown ops, negative sizes and null pointers", () => {
  const x = new Float32Array(4);
  failsWith(K.dt_unary_fwd(7, ptr(x), ptr(x), 4n, 0, 0, null), "dt_unary_fwd: unknown op 7");
  failsWith(
    K.dt_unary_bwd(-1, ptr(x), ptr(x), ptr(x), ptr(x), 4n, 0, 0, null),
    "dt_unary_bwd: unknown op -1",
  );
  failsWith(K.dt_unary_fwd(0, ptr(x), ptr(x), -1n, 0, 0, null), "negative size n=-1");
  failsWith(K.dt_unary_bwd(0, ptr(x), null, ptr(x), ptr(x), 4n, 0, 0, null), "null pointer");
  failsWith(K.dt_where(ptr(x), null, ptr(x), ptr(x), 4n, 0, 0, null), "dt_where: null pointer");
  ok(K.dt_unary_fwd(0, null, null, 0n, 0, 0, null));
});
