/**
 * Benchmark of dtrain's CPU GEMM (dt_gemm) against OpenBLAS's cblas_sgemm,
 * both on one thread, side by side in one run on the same f32 inputs, over
 * 512^3 and the shapes of the toy model and GPT-mini (forward and backward).
 *
 *   deno run -A scripts/bench_gemm.ts [--seconds 0.2] [--trials 7]
 *       [--filter TEXT] [--openblas PATH] [--clock wall|cpu]
 *
 * Method: per shape, a warm-up, then `trials` alternating timings of each
 * library, each trial repeating the product for seconds / trials. Columns:
 * GFLOP/s = 2 * M * N * K * batch / (median seconds per product) / 1e9;
 * ratio = median over trials of (OpenBLAS time / dtrain time) within one
 * trial, paired so that load from other processes largely cancels out;
 * rel err = max |C_dtrain - C_openblas| / max |C_openblas|, so a wrong fast
 * kernel cannot look good (above 1e-4 the run fails). A batch runs as one
 * dt_gemm call and as `batch` cblas_sgemm calls (as torch.bmm does on the
 * CPU). Every operand starts on a 64-byte boundary, each library's C as
 * well as the shared A and B. DTRAIN_CPU_ISA (avx512, avx2, generic) caps
 * dtrain's kernel. Exits 0 unless something failed.
 *
 * --clock cpu times with the calling thread's CPU clock instead of the wall
 * clock. Both libraries run one thread, the calling one, so this counts
 * exactly their work and leaves out the time the thread waits for a core: on
 * a machine whose load average is well above its core count a wall-clock trial
 * mostly measures the scheduler, and the paired ratios scatter by 2x or more.
 */
import { parseArgs } from "node:util";
import { cpuKernels } from "../ffi/cpu.ts";
import { cString } from "../ffi/native.ts";
import { dropHandicapsInProcess, handicapsSet, peerEnvLine } from "./peer_env.ts";

/** One product: C[b] (M x N) = op(A[b]) (M x K) @ op(B[b]) (K x N). */
interface Shape {
  name: string;
  M: number;
  N: number;
  K: number;
  transA: boolean;
  transB: boolean;
  batch: number;
}

const shape = (name: string, M: number, N: number, K: number, t: string, batch = 1): Shape => ({
  name,
  M,
  N,
  K,
  transA: t[0] === "T",
  transB: t[1] === "T",
  batch,
});

/** A linear layer y = x W^T (rows x in -> rows x out) and its two gradients. */
const linear = (name: string, rows: number, inp: number, out: number): Shape[] => [
  shape(`${name} fwd`, rows, out, inp, "NT"),
  shape(`${name} dX`, rows, inp, out, "NN"),
  shape(`${name} dW`, out, inp, rows, "TN"),
];

const SHAPES: Shape[] = [
  shape("square 512^3", 512, 512, 512, "NN"),
  // toy model: Linear 128 -> 256, ReLU, Linear 256 -> 2, batch 64
  ...linear("toy fc1", 64, 128, 256),
  ...linear("toy fc2", 64, 256, 2),
  // GPT-mini: batch 16 x block 128 = 2048 rows, width 128, 4 heads of 32, vocab 256
  ...linear("gpt qkv", 2048, 128, 384),
  ...linear("gpt attn proj", 2048, 128, 128),
  ...linear("gpt mlp fc", 2048, 128, 512),
  ...linear("gpt mlp proj", 2048, 512, 128),
  ...linear("gpt lm_head", 2048, 128, 256),
  // attention over 16 x 4 = 64 heads: scores = q k^T, out = att v, and their gradients
  shape("gpt att q@k^T", 128, 128, 32, "NT", 64),
  shape("gpt att att@v", 128, 32, 128, "NN", 64),
  shape("gpt att d_att", 128, 128, 32, "NT", 64),
  shape("gpt att dv", 128, 32, 128, "TN", 64),
  shape("gpt att dq", 128, 32, 128, "NN", 64),
  shape("gpt att dk", 128, 32, 128, "TN", 64),
];

/** Where Debian and other distributions put OpenBLAS (multiarch folder first). */
function openblasCandidates(): string[] {
  const triplet = `${Deno.build.arch}-linux-gnu`;
  const dirs = [
    `/usr/lib/${triplet}/openblas-pthread`,
    `/usr/lib/${triplet}/openblas-openmp`,
    `/usr/lib/${triplet}/openblas-serial`,
    `/usr/lib/${triplet}`,
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
  ];
  return dirs.flatMap((d) => [`${d}/libopenblas.so.0`, `${d}/libopenblas.so`]);
}

const OPENBLAS_SYMBOLS = {
  /** (order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) */
  cblas_sgemm: {
    parameters: [
      "i32",
      "i32",
      "i32",
      "i32",
      "i32",
      "i32",
      "f32",
      "pointer",
      "i32",
      "pointer",
      "i32",
      "f32",
      "pointer",
      "i32",
    ],
    result: "void",
  },
  openblas_set_num_threads: { parameters: ["i32"], result: "void" },
  openblas_get_corename: { parameters: [], result: "pointer", optional: true },
} as const satisfies Deno.ForeignLibraryInterface;

function openOpenblas(
  path?: string,
): { lib: Deno.DynamicLibrary<typeof OPENBLAS_SYMBOLS>; path: string } {
  const tried = path ? [path] : openblasCandidates();
  for (const p of tried) {
    try {
      Deno.statSync(p);
    } catch {
      continue;
    }
    return { lib: Deno.dlopen(p, OPENBLAS_SYMBOLS), path: p };
  }
  throw new Error(
    `Cannot find OpenBLAS: looked in ${tried.join(", ")}. ` +
      `Install it with \`apt-get install -y libopenblas0-pthread\` or pass --openblas PATH.`,
  );
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** A clock in seconds. */
export type Clock = () => number;

const wallClock: Clock = () => performance.now() / 1000;

/**
 * The calling thread's CPU time (clock_gettime(CLOCK_THREAD_CPUTIME_ID)) through libc, or
 * an error naming what is missing where libc cannot be loaded.
 */
export function threadCpuClock(): Clock {
  const CLOCK_THREAD_CPUTIME_ID = 3; // Linux
  let libc;
  try {
    libc = Deno.dlopen("libc.so.6", {
      clock_gettime: { parameters: ["i32", "buffer"], result: "i32" },
    });
  } catch (e) {
    throw new Error(`--clock cpu needs libc.so.6 for clock_gettime: ${e}`);
  }
  const ts = new BigInt64Array(2); // struct timespec { tv_sec, tv_nsec } on 64-bit Linux
  return () => {
    if (libc.symbols.clock_gettime(CLOCK_THREAD_CPUTIME_ID, ts) !== 0) {
      throw new Error("clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    }
    return Number(ts[0]) + Number(ts[1]) * 1e-9;
  };
}

/** Seconds per call of fn over `reps` calls. */
function timeCalls(clock: Clock, fn: () => void, reps: number): number {
  const t0 = clock();
  for (let i = 0; i < reps; i++) fn();
  return (clock() - t0) / reps;
}

/** How many calls of fn take about `seconds` (at least 1). */
function calibrate(clock: Clock, fn: () => void, seconds: number): number {
  let reps = 1;
  for (;;) {
    const t = timeCalls(clock, fn, reps) * reps;
    if (t >= 0.01 || reps >= 1 << 20) return Math.max(1, Math.round(reps * seconds / t));
    reps *= 2;
  }
}

/**
 * n zeroed floats starting on a 64-byte boundary. JavaScript's arrays start wherever the heap puts
 * them: a C or A that straddles cache lines makes a small product's loads and stores split lines,
 * about 20 % slower for fc2's products in either library, so each library's buffers are aligned
 * alike and a run does not hand one of them the worse placement by chance.
 */
function alignedF32(n: number): Float32Array<ArrayBuffer> {
  const buf = new ArrayBuffer(n * 4 + 64);
  const at = Number(Deno.UnsafePointer.value(Deno.UnsafePointer.of(new Uint8Array(buf))));
  return new Float32Array(buf, (64 - at % 64) % 64, n);
}

/** Random f32 values in [-1, 1) from a small seeded generator. */
function randomF32(n: number, seed: number): Float32Array<ArrayBuffer> {
  const a = alignedF32(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = s / 2 ** 31 - 1;
  }
  return a;
}

interface Row {
  shape: Shape;
  /** GFLOP/s from the median time */
  dtrain: number;
  openblas: number;
  /** median over trials of (OpenBLAS time / dtrain time) of the same trial */
  ratio: number;
  relErr: number;
}

function cpuModel(): string {
  try {
    return Deno.readTextFileSync("/proc/cpuinfo").match(/model name\s*:\s*(.*)/)?.[1] ??
      "unknown CPU";
  } catch {
    return "unknown CPU";
  }
}

/** The 1, 5 and 15 minute load averages, as /proc/loadavg gives them ("?" where it cannot be read). */
function loadAverage(): string {
  try {
    return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
  } catch {
    return "?";
  }
}

function main(): number {
  const args = parseArgs({
    args: Deno.args,
    options: {
      seconds: { type: "string", default: "0.2" },
      trials: { type: "string", default: "7" },
      filter: { type: "string", default: "" },
      openblas: { type: "string" },
      clock: { type: "string", default: "wall" },
      // a last line of JSON for scripts (bench_ddp takes the single-thread sgemm peak from it)
      json: { type: "boolean", default: false },
    },
  });
  const seconds = Number(args.values.seconds), trials = Number(args.values.trials);
  if (!(seconds > 0) || !(trials >= 1)) {
    throw new RangeError("--seconds must be > 0 and --trials >= 1");
  }
  if (args.values.clock !== "wall" && args.values.clock !== "cpu") {
    throw new RangeError(`--clock must be wall or cpu, not ${JSON.stringify(args.values.clock)}`);
  }
  const clock = args.values.clock === "cpu" ? threadCpuClock() : wallClock;
  const shapes = SHAPES.filter((s) => s.name.includes(args.values.filter));
  if (shapes.length === 0) {
    throw new RangeError(`no shape name contains --filter ${JSON.stringify(args.values.filter)}`);
  }

  const dt = cpuKernels();
  const { dt_gemm, dt_set_num_threads } = dt.symbols;
  dt.check(dt_set_num_threads(1), "dt_set_num_threads");
  // OpenBLAS reads OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE when it is loaded: gone before that, it
  // runs the kernel it would choose for this processor (dtrain's library never reads them).
  const handicaps = handicapsSet();
  dropHandicapsInProcess();
  const ob = openOpenblas(args.values.openblas);
  const { cblas_sgemm, openblas_set_num_threads, openblas_get_corename } = ob.lib.symbols;
  openblas_set_num_threads(1);

  const core = openblas_get_corename ? cString(openblas_get_corename()) : "?";
  console.log(`CPU: ${cpuModel()}; one thread each`);
  console.log(
    `dtrain: ${dt.path} (DTRAIN_CPU_ISA=${Deno.env.get("DTRAIN_CPU_ISA") ?? "best available"})`,
  );
  console.log(`OpenBLAS: ${ob.path} (core ${core})`);
  console.log(
    handicaps.length === 0
      ? peerEnvLine()
      : `peer environment: ${handicaps.join(", ")} unset before OpenBLAS was loaded`,
  );
  console.log(
    `${seconds} s per shape per library, median of ${trials} trials, ${
      args.values.clock === "cpu" ? "timed by the thread's CPU clock" : "timed by the wall clock"
    }; load average ${loadAverage()}\n`,
  );
  const header = [
    "shape",
    "M x N x K",
    "op",
    "batch",
    "dtrain GFLOP/s",
    "OpenBLAS GFLOP/s",
    "ratio",
    "rel err",
  ];
  console.log(header.join(" | "));
  console.log(header.map(() => "---").join(" | "));

  const rows: Row[] = [];
  for (const s of shapes) {
    const rowsA = s.transA ? s.K : s.M, colsA = s.transA ? s.M : s.K;
    const rowsB = s.transB ? s.N : s.K, colsB = s.transB ? s.K : s.N;
    const a = randomF32(rowsA * colsA * s.batch, 1), b = randomF32(rowsB * colsB * s.batch, 2);
    const cDt = alignedF32(s.M * s.N * s.batch), cOb = alignedF32(s.M * s.N * s.batch);
    const pa = Deno.UnsafePointer.of(a), pb = Deno.UnsafePointer.of(b);
    const pcDt = Deno.UnsafePointer.of(cDt);
    const offsets = (p: Deno.PointerValue, step: number) =>
      Array.from({ length: s.batch }, (_, i) => Deno.UnsafePointer.offset(p!, i * step * 4));
    const paB = offsets(pa, rowsA * colsA), pbB = offsets(pb, rowsB * colsB);
    const pcB = offsets(Deno.UnsafePointer.of(cOb), s.M * s.N);
    const [ta, tb] = [s.transA ? 1 : 0, s.transB ? 1 : 0];
    const [M, N, K, lda, ldb, batch] = [s.M, s.N, s.K, colsA, colsB, s.batch].map(BigInt);
    const [sA, sB, sC] = [rowsA * colsA, rowsB * colsB, s.M * s.N].map(BigInt);
    let status = 0;
    const runDt = () => {
      status |= dt_gemm(
        0,
        ta,
        tb,
        M!,
        N!,
        K!,
        1,
        pa,
        lda!,
        pb,
        ldb!,
        0,
        pcDt,
        N!,
        batch!,
        sA!,
        sB!,
        sC!,
        null,
      );
    };
    const [obTa, obTb] = [s.transA ? 112 : 111, s.transB ? 112 : 111]; // CblasTrans / CblasNoTrans
    const runOb = () => {
      for (let i = 0; i < s.batch; i++) {
        cblas_sgemm(
          101,
          obTa,
          obTb,
          s.M,
          s.N,
          s.K,
          1,
          paB[i]!,
          colsA,
          pbB[i]!,
          colsB,
          0,
          pcB[i]!,
          s.N,
        );
      }
    };
    runDt();
    dt.check(status, "dt_gemm");
    runOb();
    const perTrial = seconds / trials;
    const repsDt = calibrate(clock, runDt, perTrial), repsOb = calibrate(clock, runOb, perTrial);
    const tDt: number[] = [], tOb: number[] = [];
    for (let t = 0; t < trials; t++) {
      tDt.push(timeCalls(clock, runDt, repsDt));
      tOb.push(timeCalls(clock, runOb, repsOb));
    }
    dt.check(status, "dt_gemm");
    let maxDiff = 0, maxRef = 0;
    for (let i = 0; i < cOb.length; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(cDt[i]! - cOb[i]!));
      maxRef = Math.max(maxRef, Math.abs(cOb[i]!));
    }
    const flop = 2 * s.M * s.N * s.K * s.batch;
    const row: Row = {
      shape: s,
      dtrain: flop / median(tDt) / 1e9,
      openblas: flop / median(tOb) / 1e9,
      ratio: median(tDt.map((t, i) => tOb[i]! / t)),
      relErr: maxRef > 0 ? maxDiff / maxRef : maxDiff,
    };
    rows.push(row);
    console.log([
      s.name,
      `${s.M} x ${s.N} x ${s.K}`,
      `${s.transA ? "T" : "N"}${s.transB ? "T" : "N"}`,
      s.batch,
      row.dtrain.toFixed(1),
      row.openblas.toFixed(1),
      row.ratio.toFixed(2),
      row.relErr.toExponential(1),
    ].join(" | "));
  }
  ob.lib.close();

  const worst = rows.reduce((w, r) => (r.ratio < w.ratio ? r : w));
  const square = rows.find((r) => r.shape.name === "square 512^3");
  console.log(
    `\n512^3 ratio: ${square ? square.ratio.toFixed(2) : "not run"}; ` +
      `minimum ratio: ${worst.ratio.toFixed(2)} (${worst.shape.name})`,
  );
  // The machine's single-thread sgemm limit as far as this run can tell: the best GFLOP/s either
  // library reached on any shape (the goals of other benchmarks are fractions of it).
  const peak = rows.reduce(
    (
      best,
      r,
    ) => (Math.max(r.dtrain, r.openblas) > best.gflops
      ? { gflops: Math.max(r.dtrain, r.openblas), shape: r.shape.name }
      : best),
    { gflops: 0, shape: "" },
  );
  console.log(
    `single-thread sgemm peak in this run: ${peak.gflops.toFixed(1)} GFLOP/s (${peak.shape}); ` +
      `load average at the end ${loadAverage()}`,
  );
  if (args.values.json) {
    console.log(JSON.stringify({
      peakGflops: peak.gflops,
      peakShape: peak.shape,
      openblasCore: core,
      rows: rows.map((r) => ({
        shape: r.shape.name,
        dtrainGflops: r.dtrain,
        openblasGflops: r.openblas,
        ratio: r.ratio,
      })),
    }));
  }
  const wrong = rows.filter((r) => !(r.relErr <= 1e-4));
  if (wrong.length > 0) {
    console.error(
      `dtrain and OpenBLAS disagree (rel err > 1e-4) on: ${
        wrong.map((r) => r.shape.name).join(", ")
      }`,
    );
    return 1;
  }
  return 0;
}

if (import.meta.main) Deno.exit(main());
