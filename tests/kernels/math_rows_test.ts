/**
 * The AVX-512 forms of exp, tanh, GELU and GELU's gradient (kernels/cpu/
 * dt_math_avx512.h, through math_rows.c) and of layer norm's moments and row
 * gradient (layernorm_avx512.c) give the bits of the scalar bodies of dt_math.h,
 * gelu.h and layernorm.h that the other kernels and the emulated GPU use:
 * dt_unary_fwd(exp, tanh), dt_gelu_fwd, dt_gelu_bwd and dt_layernorm_fwd/bwd
 * run in two child processes, one with DTRAIN_CPU_ISA=avx512 (the
 * intrinsics) and one with DTRAIN_CPU_ISA=avx2 (the compiler's vectorisation
 * of the scalar bodies), and every output must match bit for bit. The sweep
 * walks the whole 32-bit space in an odd stride (every binade, both signs,
 * subnormals, NaN payloads) plus the points where the bodies switch branch:
 * exp's clamps at -105 and 89 and where it overflows or goes subnormal,
 * tanh's 0.625, the infinities and signed zeros. All 2^32 inputs are compared
 * by scripts/math_avx512_exhaustive.c (minutes: run by hand after a change to
 * the intrinsics); here it is compiled, so that it stays runnable.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { K, layerNormF32, n64, ok, ptr } from "./_helpers.ts";
import { gemmKernel } from "../../ffi/cpu_extras.ts";

const UN_EXP = 0, UN_TANH = 3;
const FUNCTIONS = ["exp", "tanh", "gelu", "gelu'"] as const;
const DT_F32 = 0, DT_BF16 = 1;

/**
 * Layer norm's forward (outputs, means, rstd) and backward on rows of C (every lane count, the
 * tails of 8 and 16), with and without a weight, f32 and bf16: its input gradients and weight /
 * bias gradients, as f32 bits.
 */
function layerNormOutputs(): Float32Array<ArrayBuffer> {
  const parts: Float32Array[] = [];
  let seed = 12345;
  const rand = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32) * 4 - 2;
  for (const C of [1, 7, 8, 9, 16, 31, 128, 131]) {
    const rows = 37;
    const x = new Float32Array(rows * C).map(rand), dy = new Float32Array(rows * C).map(rand);
    const w = new Float32Array(C).map(rand), b = new Float32Array(C).map(rand);
    const { out: y, mean, rstd } = layerNormF32(x, w, b, rows, C, 1e-5);
    parts.push(y, mean, rstd);
    for (const weight of [w, null]) {
      const dx = new Float32Array(rows * C), dw = new Float32Array(C), db = new Float32Array(C);
      ok(
        K.dt_layernorm_bwd(
          ptr(dx),
          ptr(dw),
          ptr(db),
          ptr(dy),
          ptr(x),
          weight ? ptr(weight) : null,
          ptr(mean),
          ptr(rstd),
          n64(rows),
          n64(C),
          DT_F32,
          DT_F32,
          DT_F32,
          0,
          null,
        ),
      );
      parts.push(dx, dw, db);
      // bf16 operands (the upper halves of the f32 values): the row buffers' path
      const half = (a: Float32Array) =>
        new Uint16Array(new Uint32Array(a.buffer).map((u) => u >>> 16));
      const dxb = new Uint16Array(rows * C);
      ok(
        K.dt_layernorm_bwd(
          ptr(dxb),
          ptr(dw),
          ptr(db),
          ptr(half(dy)),
          ptr(half(x)),
          weight ? ptr(weight) : null,
          ptr(mean),
          ptr(rstd),
          n64(rows),
          n64(C),
          DT_BF16,
          DT_BF16,
          DT_BF16,
          0,
          null,
        ),
      );
      parts.push(new Float32Array(new Uint32Array(dxb).map((h) => h << 16).buffer), dw, db);
    }
  }
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) out.set(p, at), at += p.length;
  return out;
}

/** The inputs: a stride through all 2^32 patterns, then the branch points and their neighbours. */
function sweep(): Float32Array<ArrayBuffer> {
  const stride = 1021, count = Math.floor(2 ** 32 / stride);
  const bits: number[] = [];
  const around = (x: number) => {
    const f = new Float32Array([x]);
    const u = new Uint32Array(f.buffer)[0]!;
    for (let d = -40; d <= 40; d++) bits.push((u + d) >>> 0);
  };
  for (const x of [0, -105, 105, 89, -89, 88.72, -87.34, -103.97, 0.625, -0.625, 0.3125, 1e-30]) {
    around(x);
    around(-x);
  }
  for (
    const u of [0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x00000001, 0x80000001]
  ) {
    bits.push(u);
  }
  const out = new Uint32Array(count + bits.length);
  for (let i = 0; i < count; i++) out[i] = (i * stride + 7) >>> 0;
  out.set(bits, count);
  return new Float32Array(out.buffer);
}

/** In a child: every function over the sweep, the four outputs one after another, to `path`. */
function writeOutputs(path: string): void {
  const x = sweep(), n = x.length;
  const dout = new Float32Array(n);
  for (let i = 0; i < n; i++) dout[i] = 0.75 - (i % 7) * 0.375; // a few scales of each sign
  const out = new Float32Array(4 * n);
  const part = (k: number): Float32Array<ArrayBuffer> => out.subarray(k * n, (k + 1) * n);
  ok(K.dt_unary_fwd(UN_EXP, ptr(part(0)), ptr(x), n64(n), 0, 0, null));
  ok(K.dt_unary_fwd(UN_TANH, ptr(part(1)), ptr(x), n64(n), 0, 0, null));
  ok(K.dt_gelu_fwd(ptr(part(2)), ptr(x), n64(n), null));
  ok(K.dt_gelu_bwd(ptr(part(3)), ptr(dout), ptr(x), n64(n), null));
  const ln = layerNormOutputs();
  const all = new Uint8Array(out.byteLength + ln.byteLength);
  all.set(new Uint8Array(out.buffer));
  all.set(new Uint8Array(ln.buffer), out.byteLength);
  Deno.writeFileSync(path, all);
}

if (import.meta.main) {
  writeOutputs(Deno.args[0]!);
  Deno.exit(0);
}

/** Whether this process's loops take the intrinsics: where the GEMM's kernel is AVX-512. */
function intrinsicsHere(): boolean {
  return gemmKernel("f32") === "avx512";
}

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

async function outputsUnder(isa: string, dir: string): Promise<Uint32Array> {
  const path = `${dir}/${isa}.bin`;
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--no-check", fileURLToPath(import.meta.url), path],
    env: { DTRAIN_CPU_ISA: isa },
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder();
  assert.equal(
    r.code,
    0,
    `DTRAIN_CPU_ISA=${isa}: ${text.decode(r.stdout)}${text.decode(r.stderr)}`,
  );
  return new Uint32Array(Deno.readFileSync(path).buffer);
}

const hex = (u: number) => "0x" + (u >>> 0).toString(16).padStart(8, "0");

Deno.test({
  name:
    "exp, tanh, GELU and its gradient, layer norm's backward: the AVX-512 intrinsics give the bits of the scalar bodies",
  ignore: !intrinsicsHere() || Deno.env.get("DTRAIN_CPU_ISA") !== undefined,
  fn: async () => {
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-math-rows-" });
    try {
      const [fast, plain] = await Promise.all([
        outputsUnder("avx512", dir),
        outputsUnder("avx2", dir),
      ]);
      const x = new Uint32Array(sweep().buffer), n = x.length;
      assert.equal(fast.length, plain.length);
      assert.ok(fast.length > 4 * n);
      for (let k = 0; k < 4; k++) {
        for (let i = 0; i < n; i++) {
          if (fast[k * n + i] !== plain[k * n + i]) {
            assert.fail(
              `${FUNCTIONS[k]}(${hex(x[i]!)}): ${hex(fast[k * n + i]!)} with AVX-512, ` +
                `${hex(plain[k * n + i]!)} from the scalar body`,
            );
          }
        }
      }
      for (let i = 4 * n; i < fast.length; i++) {
        if (fast[i] !== plain[i]) {
          assert.fail(
            `layer norm, output ${i - 4 * n}: ${hex(fast[i]!)} with AVX-512, ` +
              `${hex(plain[i]!)} from the scalar body`,
          );
        }
      }
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});

Deno.test("scripts/math_avx512_exhaustive.c, the comparison over all 2^32 inputs, compiles against the header", () => {
  const root = fileURLToPath(new URL("../..", import.meta.url));
  const r = new Deno.Command("gcc", {
    args: [
      "-fsyntax-only",
      "-Wall",
      "-Werror",
      "-ffp-contract=off",
      "-Ikernels/cpu",
      "-Ikernels/common",
      "scripts/math_avx512_exhaustive.c",
    ],
    cwd: root,
  }).outputSync();
  assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
});
