/**
 * Tests of dt_attention_fwd/bwd on the CPU against float64 references of
 * softmax(scale q k^T) v and its gradients: causal and full, sequence
 * lengths that are not multiples of the tiles (32 query rows, 64 keys), head
 * dimensions from 1 to 256, several batches and heads read from the fused
 * (B, T, 3, H, D) layout, f32 and bf16; results that do not depend on the
 * thread count; and the argument checks.
 */
import assert from "node:assert/strict";
import {
  failsWith,
  GuardedMemory,
  isIsaChild,
  K,
  n64,
  ok,
  ptr,
  Rng,
  testUnderEachIsa,
  withThreads,
} from "./_helpers.ts";

const DT = { f32: 0, bf16: 1, f16: 2 } as const;

interface Shape {
  B: number;
  T: number;
  H: number;
  D: number;
  causal: boolean;
}

const u32 = new Uint32Array(1), f32v = new Float32Array(u32.buffer);

/** f32 values rounded to bf16 bits (round to nearest even). */
function toBf16(x: Float32Array): Uint16Array<ArrayBuffer> {
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) {
    f32v[0] = x[i]!;
    const u = u32[0]!;
    out[i] = ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
  }
  return out;
}

function fromBf16(h: Uint16Array): Float32Array {
  const out = new Float32Array(h.length);
  for (let i = 0; i < h.length; i++) {
    u32[0] = h[i]! << 16;
    out[i] = f32v[0]!;
  }
  return out;
}

/** Reference forward and backward in float64 from the values of qkv and dout. */
function reference(
  s: Shape,
  qkv: ArrayLike<number>,
  dout: ArrayLike<number>,
  scale: number,
): { out: Float64Array; lse: Float64Array; dqkv: Float64Array } {
  const { B, T, H, D, causal } = s;
  const C = H * D, W = 3 * C;
  const out = new Float64Array(B * T * C), lse = new Float64Array(B * H * T);
  const dqkv = new Float64Array(B * T * W);
  const at = (b: number, t: number, part: number, h: number, d: number) =>
    (b * T + t) * W + part * C + h * D + d;
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const P = new Float64Array(T * T);
      for (let i = 0; i < T; i++) {
        const last = causal ? i : T - 1;
        let max = -Infinity;
        const z = new Float64Array(last + 1);
        for (let j = 0; j <= last; j++) {
          let dot = 0;
          for (let d = 0; d < D; d++) dot += qkv[at(b, i, 0, h, d)]! * qkv[at(b, j, 1, h, d)]!;
          z[j] = dot * scale;
          max = Math.max(max, z[j]!);
        }
        let sum = 0;
        for (let j = 0; j <= last; j++) sum += Math.exp(z[j]! - max);
        lse[(b * H + h) * T + i] = max + Math.log(sum);
        for (let j = 0; j <= last; j++) P[i * T + j] = Math.exp(z[j]! - max) / sum;
        for (let d = 0; d < D; d++) {
          let y = 0;
          for (let j = 0; j <= last; j++) y += P[i * T + j]! * qkv[at(b, j, 2, h, d)]!;
          out[(b * T + i) * C + h * D + d] = y;
        }
      }
      for (let i = 0; i < T; i++) {
        const last = causal ? i : T - 1;
        const dP = new Float64Array(last + 1);
        let rowDot = 0;
        for (let j = 0; j <= last; j++) {
          let v = 0;
          for (let d = 0; d < D; d++) {
            v += dout[(b * T + i) * C + h * D + d]! * qkv[at(b, j, 2, h, d)]!;
          }
          dP[j] = v;
          rowDot += P[i * T + j]! * v;
        }
        for (let j = 0; j <= last; j++) {
          const p = P[i * T + j]!, dS = p * (dP[j]! - rowDot) * scale;
          for (let d = 0; d < D; d++) {
            dqkv[at(b, i, 0, h, d)] += dS * qkv[at(b, j, 1, h, d)]!;
            dqkv[at(b, j, 1, h, d)] += dS * qkv[at(b, i, 0, h, d)]!;
            dqkv[at(b, j, 2, h, d)] += p * dout[(b * T + i) * C + h * D + d]!;
          }
        }
      }
    }
  }
  return { out, lse, dqkv };
}

/** max |a - e| / max |e|: the normwise relative error. */
function normwise(a: ArrayLike<number>, e: ArrayLike<number>): number {
  let worst = 0, scale = 0;
  for (let i = 0; i < e.length; i++) {
    if (Number.isNaN(a[i]!)) return Infinity;
    worst = Math.max(worst, Math.abs(a[i]! - e[i]!));
    scale = Math.max(scale, Math.abs(e[i]!));
  }
  return worst / (scale || 1);
}

/**
 * Runs both kernels on random inputs; returns the results as f32 values. With `guard`, every
 * input (q, k, v, dO, the forward's output and lse) ends right before an inaccessible page.
 */
function run(s: Shape, dtype: keyof typeof DT, seed: number, guard?: GuardedMemory) {
  const { B, T, H, D } = s;
  const rng = new Rng(seed);
  const C = H * D;
  const qkv32 = rng.normals(B * T * 3 * C), dout32 = rng.normals(B * T * C);
  const scale = 1 / Math.sqrt(D);
  const low = dtype !== "f32";
  const qkv = low ? toBf16(qkv32) : qkv32, dout = low ? toBf16(dout32) : dout32;
  const out = low ? new Uint16Array(B * T * C) : new Float32Array(B * T * C);
  const dqkv = low ? new Uint16Array(B * T * 3 * C) : new Float32Array(B * T * 3 * C);
  const lse = new Float32Array(B * H * T);
  const code = DT[dtype], causal = s.causal ? 1 : 0;
  const input = (a: Float32Array<ArrayBuffer> | Uint16Array<ArrayBuffer>) =>
    guard ? guard.place(a).ptr : ptr(a);
  ok(
    K.dt_attention_fwd(
      ptr(out),
      ptr(lse),
      input(qkv),
      code,
      n64(B),
      n64(T),
      n64(H),
      n64(D),
      causal,
      scale,
      null,
    ),
  );
  ok(
    K.dt_attention_bwd(
      ptr(dqkv),
      input(dout),
      input(qkv),
      input(out),
      input(lse),
      code,
      n64(B),
      n64(T),
      n64(H),
      n64(D),
      causal,
      scale,
      null,
    ),
  );
  const f = (a: Float32Array | Uint16Array) => (a instanceof Uint16Array ? fromBf16(a) : a);
  return {
    qkv: f(qkv),
    dout: f(dout),
    out: f(out),
    lse,
    dqkv: f(dqkv),
    scale,
    raw: { out, dqkv, lse },
  };
}

const SHAPES: Shape[] = [
  { B: 1, T: 1, H: 1, D: 1, causal: true },
  { B: 2, T: 33, H: 3, D: 16, causal: true },
  { B: 1, T: 65, H: 2, D: 64, causal: true },
  { B: 1, T: 128, H: 2, D: 32, causal: true }, // GPT-mini's: the longest T whose bf16 rows are one key tile
  { B: 1, T: 130, H: 1, D: 32, causal: false },
  { B: 1, T: 70, H: 2, D: 128, causal: true },
  { B: 1, T: 40, H: 1, D: 256, causal: true },
  { B: 1, T: 20, H: 1, D: 5, causal: true },
  { B: 2, T: 97, H: 2, D: 48, causal: false },
  // past T = 256 the CPU kernel's tiles are 64 x 64 instead of 32 x 32: a partial last tile of each
  { B: 1, T: 300, H: 1, D: 24, causal: true },
  { B: 1, T: 259, H: 2, D: 32, causal: false },
];

for (const s of SHAPES) {
  Deno.test(
    `dt_attention f32 B=${s.B} T=${s.T} H=${s.H} D=${s.D}${
      s.causal ? " causal" : ""
    } matches float64`,
    () => {
      const r = run(s, "f32", s.T * 31 + s.D);
      const ref = reference(s, r.qkv, r.dout, r.scale);
      // sums of T products of unit-size values in f32: a few 1e-7 relative
      const errOut = normwise(r.out, ref.out), errLse = normwise(r.lse, ref.lse);
      const errGrad = normwise(r.dqkv, ref.dqkv);
      assert.ok(errOut < 2e-6, `out: normwise error ${errOut}`);
      assert.ok(errLse < 2e-6, `lse: normwise error ${errLse}`);
      assert.ok(errGrad < 1e-5, `dqkv: normwise error ${errGrad}`);
    },
  );
}

for (const s of SHAPES) {
  Deno.test(
    `dt_attention bf16 B=${s.B} T=${s.T} H=${s.H} D=${s.D}${
      s.causal ? " causal" : ""
    }: f32 sums, bf16 roundings`,
    () => {
      const r = run(s, "bf16", 7 + s.D);
      const ref = reference(s, r.qkv, r.dout, r.scale);
      // The inputs are bf16 values (exact in the reference) and every sum is f32; outputs are
      // rounded once (2^-9 relative). With AVX512_BF16 (vdpbf16ps) P and dS are also rounded to
      // bf16 where they enter P V, dS K, dS^T Q and P^T dO, as torch's composed attention rounds
      // softmax's output: errors of 2^-9 relative per term, which average out over the keys and
      // add about as much again as the output's rounding (measured up to 3.5e-3 / 3.3e-3 on
      // these shapes with either path).
      assert.ok(normwise(r.out, ref.out) < 4e-3, `out: ${normwise(r.out, ref.out)}`);
      // lse comes from f32 scores of exact bf16 products either way
      assert.ok(normwise(r.lse, ref.lse) < 2e-6, `lse: ${normwise(r.lse, ref.lse)}`);
      assert.ok(normwise(r.dqkv, ref.dqkv) < 8e-3, `dqkv: ${normwise(r.dqkv, ref.dqkv)}`);
    },
  );
}

Deno.test("dt_attention bf16 gives the same bits on 1 and 2 threads", () => {
  const s: Shape = { B: 2, T: 77, H: 3, D: 32, causal: true };
  const one = withThreads(1, () => run(s, "bf16", 5).raw);
  const two = withThreads(2, () => run(s, "bf16", 5).raw);
  assert.deepEqual(two.out, one.out);
  assert.deepEqual(two.lse, one.lse);
  assert.deepEqual(two.dqkv, one.dqkv);
});

Deno.test("dt_attention gives the same bits on 1 and 2 threads", () => {
  const s: Shape = { B: 2, T: 77, H: 3, D: 32, causal: true };
  const one = withThreads(1, () => run(s, "f32", 5).raw);
  const two = withThreads(2, () => run(s, "f32", 5).raw);
  assert.deepEqual(two.out, one.out);
  assert.deepEqual(two.lse, one.lse);
  assert.deepEqual(two.dqkv, one.dqkv);
});

Deno.test("dt_attention reads nothing past q, k, v, dO, the output or lse (guard pages)", () => {
  // f32 rows are read in place where D is a multiple of the kernel's nr (32, 64), else copied;
  // with one head its v ends each row, so the last row's v ends the buffer. The bits must be
  // those of an unguarded run.
  using guard = new GuardedMemory();
  for (const dtype of ["f32", "bf16"] as const) {
    for (
      const s of [
        { B: 1, T: 70, H: 1, D: 32, causal: true },
        { B: 2, T: 33, H: 2, D: 64, causal: false },
        { B: 1, T: 40, H: 1, D: 16, causal: true },
        { B: 1, T: 9, H: 1, D: 5, causal: true },
      ]
    ) {
      const plain = run(s, dtype, 21).raw, guarded = run(s, dtype, 21, guard).raw;
      const what = `${dtype} T=${s.T} H=${s.H} D=${s.D}`;
      assert.deepEqual(guarded.out, plain.out, what);
      assert.deepEqual(guarded.lse, plain.lse, what);
      assert.deepEqual(guarded.dqkv, plain.dqkv, what);
    }
  }
});

Deno.test("dt_attention: a causal row ignores every later key", () => {
  // changing the last position's k and v changes only the last row's output
  const rng = new Rng(3);
  const qkv = rng.normals(50 * 24);
  const out1 = new Float32Array(50 * 8),
    out2 = new Float32Array(50 * 8),
    lse = new Float32Array(50);
  const call = (x: Float32Array<ArrayBuffer>, out: Float32Array<ArrayBuffer>) =>
    ok(K.dt_attention_fwd(ptr(out), ptr(lse), ptr(x), 0, 1n, 50n, 1n, 8n, 1, 0.3, null));
  call(qkv, out1);
  const changed = qkv.slice();
  for (let d = 8; d < 24; d++) changed[49 * 24 + d] += 5;
  call(changed, out2);
  assert.deepEqual(out2.subarray(0, 49 * 8), out1.subarray(0, 49 * 8));
  assert.notDeepEqual(out2.subarray(49 * 8), out1.subarray(49 * 8));
});

for (const [T, D] of [[50, 8], [128, 32]] as const) {
  Deno.test(`dt_attention bf16 T=${T} D=${D}: a causal row ignores every later key, forward and backward`, () => {
    // the last position's k and v changed by a large amount change only the last row's output
    // and lse and only its dQ: the scores of every earlier row against it are computed with the
    // rest of their tile and must weigh exactly 0 (P) and give dS = 0 there
    const rng = new Rng(11 + T);
    const W = 3 * D;
    const qkv32 = rng.normals(T * W), dout = toBf16(rng.normals(T * D));
    const call = (x: Float32Array) => {
      const qkv = toBf16(x);
      const out = new Uint16Array(T * D), lse = new Float32Array(T);
      const dqkv = new Uint16Array(T * W);
      const args = [n64(1), n64(T), n64(1), n64(D), 1, 0.3, null] as const;
      ok(K.dt_attention_fwd(ptr(out), ptr(lse), ptr(qkv), DT.bf16, ...args));
      ok(K.dt_attention_bwd(ptr(dqkv), ptr(dout), ptr(qkv), ptr(out), ptr(lse), DT.bf16, ...args));
      const dq = new Uint16Array(T * D);
      for (let t = 0; t < T; t++) dq.set(dqkv.subarray(t * W, t * W + D), t * D);
      return { out, lse, dq };
    };
    const one = call(qkv32);
    const changed = qkv32.slice();
    for (let d = D; d < W; d++) changed[(T - 1) * W + d] += d % 2 ? 40 : -40;
    const two = call(changed);
    const early = (a: Uint16Array | Float32Array, per: number) => a.subarray(0, (T - 1) * per);
    assert.deepEqual(early(two.out, D), early(one.out, D));
    assert.deepEqual(early(two.lse, 1), early(one.lse, 1));
    assert.deepEqual(early(two.dq, D), early(one.dq, D));
    assert.notDeepEqual(two.out.subarray((T - 1) * D), one.out.subarray((T - 1) * D));
    assert.notDeepEqual(two.lse.subarray(T - 1), one.lse.subarray(T - 1));
  });
}

Deno.test("dt_attention refuses bad arguments with the names of what is wrong", () => {
  const F = new Float32Array(3 * 64);
  const p = ptr(F);
  failsWith(K.dt_attention_fwd(p, p, p, 0, 1n, 2n, 1n, 0n, 1, 1, null), "head dimension D=0");
  failsWith(K.dt_attention_fwd(p, p, p, 0, 1n, 2n, 1n, 257n, 1, 1, null), "must be in [1, 256]");
  failsWith(K.dt_attention_fwd(p, p, p, 3, 1n, 2n, 1n, 4n, 1, 1, null), "dtype 3 is not supported");
  failsWith(K.dt_attention_fwd(p, p, p, 0, 1n, 2n, 1n, 4n, 2, 1, null), "causal=2");
  failsWith(K.dt_attention_fwd(p, p, p, 0, 1n, 2n, 1n, 4n, 1, Infinity, null), "not finite");
  failsWith(K.dt_attention_fwd(null, p, p, 0, 1n, 2n, 1n, 4n, 1, 1, null), "null pointer");
  failsWith(
    K.dt_attention_bwd(p, p, p, p, p, 0, 1n, 2n, 1n, 4n, 1, 1, null),
    "dqkv must not alias an input",
  );
  // nothing to do: valid without pointers
  ok(K.dt_attention_fwd(null, null, null, 0, 0n, 5n, 2n, 4n, 1, 1, null));
  ok(K.dt_attention_bwd(null, null, null, null, null, 1, 3n, 0n, 2n, 4n, 1, 1, null));
});

// The file again with one kernel forced (DTRAIN_CPU_ISA): the bf16 heads through vdpbf16ps where
// the CPU has AVX512_BF16, and the plain f32 tiles of each other micro-kernel.
testUnderEachIsa("dt_attention", import.meta.url);

/** The f32 attention's bits (hex digest of out, lse and dqkv) in a child process under `isa`. */
async function f32AttentionBits(isa: string): Promise<string> {
  const script = `import { cpuKernels } from ${
    JSON.stringify(new URL("../../ffi/cpu.ts", import.meta.url).href)
  };
    const k = cpuKernels().symbols;
    const p = (a) => Deno.UnsafePointer.of(a);
    let seed = 12345, hash = 2166136261;
    const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 4 - 2;
    const digest = (a) => { for (const b of new Uint8Array(a.buffer)) hash = Math.imul(hash ^ b, 16777619) >>> 0; };
    for (const [B, T, H, D, causal] of [[2, 128, 2, 32, 1], [2, 77, 3, 33, 1], [1, 100, 2, 40, 0]]) {
      const C = H * D, qkv = Float32Array.from({ length: B * T * 3 * C }, rand);
      const dout = Float32Array.from({ length: B * T * C }, rand);
      const out = new Float32Array(B * T * C), lse = new Float32Array(B * H * T);
      const dqkv = new Float32Array(B * T * 3 * C);
      const args = [BigInt(B), BigInt(T), BigInt(H), BigInt(D), causal, 1 / Math.sqrt(D), null];
      if (k.dt_attention_fwd(p(out), p(lse), p(qkv), 0, ...args) !== 0) throw new Error("fwd");
      if (k.dt_attention_bwd(p(dqkv), p(dout), p(qkv), p(out), p(lse), 0, ...args) !== 0) throw new Error("bwd");
      digest(out); digest(lse); digest(dqkv);
    }
    console.log(hash.toString(16));`;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=js", script],
    env: { DTRAIN_CPU_ISA: isa },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder();
  assert.equal(out.code, 0, text.decode(out.stderr));
  return text.decode(out.stdout).trim();
}

const cpuFlags = new Set(
  /^flags\s*:\s*(.*)$/m.exec(Deno.readTextFileSync("/proc/cpuinfo"))?.[1]?.split(/\s+/) ?? [],
);

Deno.test({
  // AVX-512 runs the exponentials, Q's and dO's transposes and delta = rowsum(dO * O) 16 rows at
  // a time; the AVX2 build row by row: the same operations in the same order, so the same bits
  name: "dt_attention f32 gives the same bits with the AVX-512 kernels as with the AVX2 ones",
  ignore: isIsaChild || !cpuFlags.has("avx512f"),
  fn: async () => {
    assert.equal(await f32AttentionBits("avx512"), await f32AttentionBits("avx2"));
  },
});
