/**
 * The AVX-512 forms of exp, tanh, GELU and GELU's gradient (kernels/cpu/
 * dt_math_avx512.h, through math_rows.c) give the bits of the scalar bodies
 * of dt_math.h and gelu.h that the other kernels and the emulated GPU use:
 * dt_unary_fwd(exp, tanh), dt_gelu_fwd and dt_gelu_bwd run over a sweep of
 * f32 inputs in two child processes, one with DTRAIN_CPU_ISA=avx512 (the
 * intrinsics) and one with DTRAIN_CPU_ISA=avx2 (the compiler's vectorisation
 * of the scalar bodies), and every output must match bit for bit. The sweep
 * walks the whole 32-bit space in an odd stride (every binade, both signs,
 * subnormals, NaN payloads) plus the points where the bodies switch branch:
 * exp's clamps at -105 and 89 and where it overflows or goes subnormal,
 * tanh's 0.625, the infinities and signed zeros. (All 2^32 inputs were
 * compared once when the intrinsics were written.)
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { K, n64, ok, ptr } from "./_helpers.ts";

const UN_EXP = 0, UN_TANH = 3;
const FUNCTIONS = ["exp", "tanh", "gelu", "gelu'"] as const;

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
  Deno.writeFileSync(path, new Uint8Array(out.buffer));
}

if (import.meta.main) {
  writeOutputs(Deno.args[0]!);
  Deno.exit(0);
}

function hasAvx512(): boolean {
  try {
    return /\bavx512f\b/.test(Deno.readTextFileSync("/proc/cpuinfo"));
  } catch {
    return false;
  }
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
    "exp, tanh, GELU and its gradient: the AVX-512 intrinsics give the bits of the scalar bodies",
  ignore: !hasAvx512() || Deno.env.get("DTRAIN_CPU_ISA") !== undefined,
  fn: async () => {
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-math-rows-" });
    try {
      const [fast, plain] = await Promise.all([
        outputsUnder("avx512", dir),
        outputsUnder("avx2", dir),
      ]);
      const x = new Uint32Array(sweep().buffer), n = x.length;
      assert.equal(fast.length, 4 * n);
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
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});
