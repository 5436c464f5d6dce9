/**
 * dtrain's bf16 GEMM against its own f32 GEMM on GPT-mini's linear layers
 * (2048 rows, width 128, MLP 512, vocab 256), one thread: each product as
 * `linear` calls it in f32 and under bf16 autocast — forward with its bias
 * (+ GELU) epilogue into a C of the operands' dtype, dX, and dW accumulated
 * in f32 with the bias gradient (dt_gemm_ex) — so the epilogues and the
 * bias-gradient sums are part of the time, as in a training step.
 *
 *   deno run -A scripts/bench_gemm_bf16.ts [--seconds 0.3] [--trials 3]
 *
 * Method: per shape, alternating trials of f32 and bf16, each repeating the
 * call for `seconds` of this thread's CPU time (steadier than wall clock on a
 * shared machine); GFLOP/s = 2 M N K / median CPU seconds per call; ratio =
 * f32 time / bf16 time; "total" sums one call of each row, and "step" weighs
 * the layer rows by GPT-mini's 4 layers. DTRAIN_CPU_ISA caps the kernels.
 */
import process from "node:process";
import { parseArgs } from "node:util";
import { cpuKernels } from "../ffi/cpu.ts";
import { gemmKernel } from "../ffi/cpu_extras.ts";

const EPI = { none: 0, bias: 1, gelu: 2, bgrad: 3 } as const;

interface Shape {
  name: string;
  M: number;
  N: number;
  K: number;
  ta: number;
  tb: number;
  epi: keyof typeof EPI;
  /** dW: an f32 C accumulated (beta 1) under either dtype */
  f32c: boolean;
  /** calls per GPT-mini step */
  perStep: number;
}

/** A linear layer (rows x inp -> out) as linear() runs it: forward, dX, dW + bias gradient. */
const linear = (
  name: string,
  rows: number,
  inp: number,
  out: number,
  perStep: number,
  gelu = false,
): Shape[] => [
  {
    name: `${name} fwd`,
    M: rows,
    N: out,
    K: inp,
    ta: 0,
    tb: 1,
    epi: gelu ? "gelu" : "bias",
    f32c: false,
    perStep,
  },
  { name: `${name} dX`, M: rows, N: inp, K: out, ta: 0, tb: 0, epi: "none", f32c: false, perStep },
  { name: `${name} dW`, M: out, N: inp, K: rows, ta: 1, tb: 0, epi: "bgrad", f32c: true, perStep },
];

const SHAPES: Shape[] = [
  ...linear("qkv", 2048, 128, 384, 4),
  ...linear("attn proj", 2048, 128, 128, 4),
  ...linear("mlp fc", 2048, 128, 512, 4, true),
  ...linear("mlp proj", 2048, 512, 128, 4),
  // the head has no bias (tied to the embedding)
  ...linear("lm_head", 2048, 128, 256, 1).map((s) => ({
    ...s,
    epi: s.epi === "bias" ? "none" as const : s.epi === "bgrad" ? "none" as const : s.epi,
  })),
];

function cpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

function main() {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      seconds: { type: "string", default: "0.3" },
      trials: { type: "string", default: "3" },
    },
  });
  const seconds = Number(values.seconds), trials = Number(values.trials);
  const dt = cpuKernels();
  const k = dt.symbols;
  dt.check(k.dt_set_num_threads(1), "dt_set_num_threads");
  const big = 2048 * 512;
  const buf = (bytes: number) => new Uint8Array(bytes);
  const A = buf(big * 4),
    B = buf(big * 4),
    C = buf(big * 4),
    aux = buf(big * 4),
    bias = buf(2048 * 4);
  // small finite values in both dtypes (bf16 is the upper half of an f32)
  const f = new Float32Array(A.buffer), g = new Float32Array(B.buffer);
  for (let i = 0; i < big; i++) {
    f[i] = ((i * 7919) % 1000) / 1000 - 0.5, g[i] = ((i * 104729) % 1000) / 1000 - 0.5;
  }
  const p = (a: Uint8Array<ArrayBuffer>) => Deno.UnsafePointer.of(a);
  const call = (s: Shape, low: boolean) => {
    const ab = low ? 1 : 0, c = s.f32c || !low ? 0 : 1;
    const lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    dt.check(
      k.dt_gemm_ex(
        ab,
        c,
        s.ta,
        s.tb,
        BigInt(s.M),
        BigInt(s.N),
        BigInt(s.K),
        1,
        p(A),
        BigInt(lda),
        p(B),
        BigInt(ldb),
        s.f32c ? 1 : 0,
        p(C),
        BigInt(s.N),
        EPI[s.epi],
        s.epi === "none" ? null : p(bias),
        s.epi === "gelu" ? p(aux) : null,
        BigInt(s.N),
        null,
      ),
      "dt_gemm_ex",
    );
  };
  const time = (s: Shape, low: boolean) => {
    call(s, low);
    let n = 0;
    const t0 = cpuSeconds();
    let t = 0;
    do {
      call(s, low);
      n++;
    } while ((t = cpuSeconds() - t0) < seconds);
    return t / n;
  };
  console.log(
    `one thread; f32 kernel ${gemmKernel("f32")}, bf16 kernel ${
      gemmKernel("bf16")
    }; CPU time, median of ${trials}`,
  );
  console.log("| product | M x N x K | f32 GFLOP/s | bf16 GFLOP/s | bf16 speed-up |");
  console.log("| --- | --- | ---: | ---: | ---: |");
  let f32Total = 0, bf16Total = 0, f32Step = 0, bf16Step = 0;
  for (const s of SHAPES) {
    const tf: number[] = [], tb: number[] = [];
    for (let t = 0; t < trials; t++) tf.push(time(s, false)), tb.push(time(s, true));
    const a = median(tf), b = median(tb), flop = 2 * s.M * s.N * s.K;
    f32Total += a, bf16Total += b, f32Step += a * s.perStep, bf16Step += b * s.perStep;
    console.log(
      `| ${s.name} | ${s.M} x ${s.N} x ${s.K} | ${(flop / a / 1e9).toFixed(1)} | ${
        (flop / b / 1e9).toFixed(1)
      } | ${(a / b).toFixed(2)}x |`,
    );
  }
  console.log(
    `one of each: f32 ${(f32Total * 1e3).toFixed(1)} ms, bf16 ${(bf16Total * 1e3).toFixed(1)} ms (${
      (f32Total / bf16Total).toFixed(2)
    }x); a GPT-mini step's linear layers: f32 ${(f32Step * 1e3).toFixed(1)} ms, bf16 ${
      (bf16Step * 1e3).toFixed(1)
    } ms (${(f32Step / bf16Step).toFixed(2)}x)`,
  );
}

main();
