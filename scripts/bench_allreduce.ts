/**
 * Benchmark of allReduce(sum) of f32 between 2, 4 and 8 ranks on this
 * machine: dtrain's shared-memory process group side by side with PyTorch's
 * gloo, plus the machine's single-thread memory-copy bandwidth as the
 * physical reference.
 *
 *   deno run -A scripts/bench_allreduce.ts [--ranks 2,4,8] [--sizes 1,16,64] [--iters 20]
 *       [--warmup 5] [--repeat 1] [--chunk BYTES] [--spin-us US] [--copy-only] [--no-gloo] [--json]
 *
 * Method (the same as scripts/peers/pytorch/w3_allreduce.py): per size,
 * `warmup` calls, then `iters` calls each preceded by a barrier; a call's time
 * is the slower rank's; with --repeat N, N runs of each (alternating dtrain and
 * gloo, so both see the same machine load) are pooled. Columns: ms/call = median call time; algbw = bytes /
 * time; busbw = algbw x 2(n-1)/n (= algbw for n = 2), GB = 1e9 bytes; ratio =
 * dtrain busbw / gloo busbw. Rows "N shared" (unless --copy-only): the same
 * calls on arrays from a shared region reserved after open (reserveShared, as
 * DDP reserves its buckets by default; then allocShared), reduced in place
 * without the data buffers, measured in the same runs. memcpy: one thread copies 256 MiB into another
 * 256 MiB buffer; GB/s = (bytes read + bytes written) / time, median of 10.
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { initProcessGroup } from "../distributed/init_process_group.ts";
import { cpuCalls, cpuKernels } from "../ffi/cpu.ts";
import { peerCommandEnv, peerEnvLine, torchPeerLine } from "./peer_env.ts";

/** A rank that runs longer than this is killed (a hang must not outlive the benchmark). */
const RANK_LIMIT_MS = 300_000;
const SELF = fileURLToPath(import.meta.url);

interface SizeTimes {
  mib: number;
  /** the buffer came from allocShared */
  shared?: boolean;
  /** seconds per timed call, slower rank */
  times: number[];
}

/** The q-quantile of xs, interpolated between the order statistics around it. */
const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  const at = q * (s.length - 1), lo = Math.floor(at);
  return s[lo]! + (s[Math.min(lo + 1, s.length - 1)]! - s[lo]!) * (at - lo);
};
const median = (xs: number[]) => quantile(xs, 0.5);

/** What the dtrain ranks measure. */
interface DtrainResult {
  sizes: SizeTimes[];
  /** µs per barrier, back to back (rank 0's mean over LATENCY_CALLS) */
  barrierUs: number;
  /** µs per allReduce of one f32, back to back */
  tinyAllReduceUs: number;
  /** 2-rank worlds: every rank copying 256 MiB at once, (read + written bytes of all) / time */
  memcpyAllGBs?: number;
  /** 2-rank worlds: every rank scaling 256 MiB in place at once (dt_scale by 1), the same measure */
  inPlaceAllGBs?: number;
}

const LATENCY_CALLS = 2000;

/** Mean µs of `fn` over LATENCY_CALLS back-to-back calls, after a warm-up. */
function latencyUs(fn: () => void): number {
  for (let i = 0; i < 200; i++) fn();
  const t0 = performance.now();
  for (let i = 0; i < LATENCY_CALLS; i++) fn();
  return ((performance.now() - t0) * 1000) / LATENCY_CALLS;
}

/** One rank of the dtrain measurement: prints the times as JSON (rank 0). */
function worker(sizes: number[], warmup: number, iters: number, shared: boolean): void {
  const world = Number(Deno.env.get("WORLD_SIZE"));
  using pg = initProcessGroup();
  // the DDP-default path: no region at open, one reserved on demand (room for one array of every
  // size, each from a 64-byte boundary)
  if (shared) pg.reserveShared!(sizes.reduce((a, m) => a + m, 0) * 2 ** 20 + 64 * sizes.length);
  const out: SizeTimes[] = [];
  // with --shared, each size twice: an ordinary array, then one in the shared region
  for (
    const [mib, inShared] of sizes.flatMap((m) =>
      shared ? [[m, false], [m, true]] as const : [[m, false]] as const
    )
  ) {
    const count = (mib << 20) / 4;
    const t = inShared ? pg.allocShared!(count) : new Float32Array(count);
    t.fill(1);
    for (let i = 0; i < warmup; i++) pg.allReduce(t);
    const mine = new Float64Array(iters);
    for (let i = 0; i < iters; i++) {
      pg.barrier("bench");
      const t0 = performance.now();
      pg.allReduce(t);
      mine[i] = (performance.now() - t0) / 1000;
    }
    const all = new Float64Array(iters * pg.size);
    pg.allGather(all, mine);
    const want = world ** (warmup + iters);
    if (t[0] !== want || t[t.length - 1] !== want) {
      throw new Error(`wrong allReduce result: ${t[0]}, ${t[t.length - 1]}, expected ${want}`);
    }
    out.push({
      mib,
      ...(inShared ? { shared: true } : {}),
      times: Array.from(
        mine,
        (_, i) => Math.max(...Array.from({ length: pg.size }, (_, r) => all[r * iters + i]!)),
      ),
    });
  }
  const one = new Float32Array(1);
  const result: DtrainResult = {
    sizes: out,
    barrierUs: latencyUs(() => pg.barrier("latency")),
    tinyAllReduceUs: latencyUs(() => pg.allReduce(one)),
    // One rank per core only: with more ranks than cores the copies take turns.
    memcpyAllGBs: pg.size === 2 ? memcpyAllRanks(pg) : undefined,
    inPlaceAllGBs: pg.size === 2 ? inPlaceAllRanks(pg) : undefined,
  };
  if (pg.rank === 0) console.log(JSON.stringify(result));
}

/**
 * Memory bandwidth of every rank copying at once: each rank copies 256 MiB
 * into another 256 MiB, all starting at a barrier; a copy's time is the
 * slower rank's; (read + written bytes of all ranks) / median time. This is
 * the bandwidth an in-place allReduce draws on: it must read and write every
 * byte of every rank's buffer, 4 bytes of memory traffic per byte of busbw
 * on 2 ranks, so busbw <= this / 4.
 */
function memcpyAllRanks(pg: ReturnType<typeof initProcessGroup>): number {
  return allRanksGBs(
    pg,
    "memcpy",
    (dst, src, bytes) => cpuCalls().dt_memcpy(dst, src, BigInt(bytes), 0),
  );
}

/**
 * The same with every rank reading and writing one 256 MiB buffer in place
 * (dt_scale by 1): the access pattern of an allReduce whose ranks reduce each
 * other's buffers directly (allocShared), every line written just read. It
 * moves the same bytes as the copies (glibc's memcpy of 256 MiB, streaming
 * stores) in another pattern, which may draw more or less; the ceiling is
 * whichever of the two is higher.
 */
function inPlaceAllRanks(pg: ReturnType<typeof initProcessGroup>): number {
  return allRanksGBs(
    pg,
    "in place",
    (dst, _src, bytes) => cpuCalls().dt_scale(dst, dst, BigInt(bytes / 4), 1),
  );
}

/** (read + written bytes of all ranks) / the median of the slower rank's times of `pass`. */
function allRanksGBs(
  pg: ReturnType<typeof initProcessGroup>,
  what: string,
  pass: (dst: Deno.PointerValue, src: Deno.PointerValue, bytes: number) => void,
): number {
  return withCopyBuffers(`all-ranks ${what}`, (dst, src, bytes) => {
    const copies = 12, warm = 2; // the first passes fault the pages in
    const mine = new Float64Array(copies);
    for (let i = 0; i < copies; i++) {
      pg.barrier(what);
      const t0 = performance.now();
      pass(dst, src, bytes);
      mine[i] = (performance.now() - t0) / 1000;
    }
    const all = new Float64Array(copies * pg.size);
    pg.allGather(all, mine);
    const slowest = Array.from(
      { length: copies - warm },
      (_, i) => Math.max(...Array.from({ length: pg.size }, (_, r) => all[r * copies + warm + i]!)),
    );
    return (pg.size * 2 * bytes) / median(slowest) / 1e9;
  });
}

/** Starts `world` processes and returns rank 0's stdout (the others' must succeed). */
async function runRanks(
  world: number,
  cmd: string,
  argsOf: (rank: number) => string[],
  envOf: (rank: number) => Record<string, string>,
  peer = false,
): Promise<string> {
  const children = Array.from(
    { length: world },
    (_, r) =>
      new Deno.Command(cmd, {
        args: argsOf(r),
        ...(peer ? peerCommandEnv(envOf(r)) : { env: envOf(r) }),
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(RANK_LIMIT_MS),
      }).spawn(),
  );
  try {
    const outs = await Promise.all(children.map((c) => c.output()));
    outs.forEach((o, r) => {
      if (!o.success) {
        throw new Error(
          `rank ${r} of ${cmd} failed (exit ${o.code}): ${new TextDecoder().decode(o.stderr)}`,
        );
      }
    });
    return new TextDecoder().decode(outs[0]!.stdout);
  } finally {
    for (const c of children) {
      try {
        c.kill("SIGKILL");
      } catch { /* already exited */ }
    }
  }
}

async function benchDtrain(
  world: number,
  sizes: number[],
  warmup: number,
  iters: number,
  extraEnv: Record<string, string>,
  shared: boolean,
): Promise<DtrainResult> {
  const runId = `bench-${Deno.pid}-${Date.now()}`;
  const stdout = await runRanks(
    world,
    Deno.execPath(),
    () => [
      "run",
      "-A",
      SELF,
      "--worker",
      "--sizes",
      sizes.join(","),
      "--warmup",
      String(warmup),
      "--iters",
      String(iters),
      ...(shared ? ["--shared"] : []),
    ],
    (r) => ({
      RANK: String(r),
      LOCAL_RANK: String(r),
      WORLD_SIZE: String(world),
      LOCAL_WORLD_SIZE: String(world),
      GROUP_RANK: "0",
      DTRAIN_NNODES: "1",
      DTRAIN_RUN_ID: runId,
      MASTER_ADDR: "127.0.0.1",
      MASTER_PORT: "29500",
      DTRAIN_NUM_THREADS: "1",
      // no fixed region at open, whatever the environment says: the worker reserves one
      DTRAIN_SHM_SHARED_BYTES: "",
      DTRAIN_SHM_SHARED_LIMIT_BYTES: "",
      ...extraEnv,
    }),
  );
  return JSON.parse(stdout.trim().split("\n").at(-1)!);
}

/** The gloo rank: w3_allreduce.py's loop (shared with bench_gloo). */
const GLOO_RANK = fileURLToPath(new URL("peers/gloo_allreduce.py", import.meta.url));

/** A Python that can import torch.distributed: DTRAIN_BENCH_PYTHON, else
 *  `python3` on PATH, else Debian's system interpreter (where python3-torch
 *  installs, and which a pyenv `python3` on PATH hides). */
function findTorchPython(): string | null {
  const env = Deno.env.get("DTRAIN_BENCH_PYTHON");
  for (const py of env ? [env] : ["python3", "/usr/bin/python3"]) {
    try {
      const ok = new Deno.Command(py, {
        args: ["-c", "import torch.distributed"],
        stdout: "null",
        stderr: "null",
      })
        .outputSync().success;
      if (ok) return py;
    } catch { /* not installed: try the next */ }
  }
  return null;
}

function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

async function benchGloo(
  world: number,
  python: string,
  sizes: number[],
  warmup: number,
  iters: number,
): Promise<SizeTimes[]> {
  const port = String(freePort());
  const stdout = await runRanks(
    world,
    python,
    () => [GLOO_RANK, sizes.join(","), String(warmup), String(iters)],
    (r) => ({
      RANK: String(r),
      WORLD_SIZE: String(world),
      LOCAL_RANK: String(r),
      MASTER_ADDR: "127.0.0.1",
      MASTER_PORT: port,
      OMP_NUM_THREADS: "1",
    }),
    true,
  );
  const line = stdout.split("\n").find((l) => l.startsWith("BENCH "));
  if (!line) throw new Error(`the gloo ranks printed no result:\n${stdout}`);
  return JSON.parse(line.slice("BENCH ".length)).sizes;
}

/** Runs `fn` with two 256 MiB buffers (source filled with ones, destination zeroed), then frees them. */
function withCopyBuffers<T>(
  what: string,
  fn: (dst: Deno.PointerValue, src: Deno.PointerValue, bytes: number) => T,
): T {
  const k = cpuKernels().symbols, call = cpuCalls();
  const bytes = 256 << 20;
  const src = k.dt_alloc(BigInt(bytes)), dst = k.dt_alloc(BigInt(bytes));
  if (src === null || dst === null) {
    throw new Error(`cannot allocate 2 x 256 MiB for the ${what} benchmark`);
  }
  try {
    call.dt_fill(src, 0, BigInt(bytes / 4), 1);
    call.dt_fill(dst, 0, BigInt(bytes / 4), 0);
    return fn(dst, src, bytes);
  } finally {
    call.dt_free(src);
    call.dt_free(dst);
  }
}

/** Single-thread copy bandwidth: (read + written bytes) / time, median of 10. */
function benchMemcpy(): number {
  return withCopyBuffers("memcpy", (dst, src, bytes) => {
    const times: number[] = [];
    for (let i = 0; i < 12; i++) {
      const t0 = performance.now();
      cpuCalls().dt_memcpy(dst, src, BigInt(bytes), 0);
      if (i >= 2) times.push((performance.now() - t0) / 1000);
    }
    return (2 * bytes) / median(times) / 1e9;
  });
}

const busbw = (world: number, mib: number, seconds: number) =>
  ((mib * 2 ** 20) / seconds) * (2 * (world - 1) / world) / 1e9;

/** What one world size measured: dtrain's and gloo's pooled call times, latencies. */
interface WorldResult {
  world: number;
  dtrain: SizeTimes[];
  gloo: SizeTimes[] | null;
  barrierUs: number;
  tinyAllReduceUs: number;
  memcpyAllGBs?: number;
  inPlaceAllGBs?: number;
}

async function measureWorld(
  world: number,
  sizes: number[],
  warmup: number,
  iters: number,
  repeat: number,
  python: string | null,
  env: Record<string, string>,
  shared: boolean,
): Promise<WorldResult> {
  // Runs alternate between dtrain and gloo, so both see the same machine load;
  // the timed calls of all runs are pooled per size.
  const runs: DtrainResult[] = [];
  const glooRuns: SizeTimes[][] = [];
  for (let i = 0; i < repeat; i++) {
    runs.push(await benchDtrain(world, sizes, warmup, iters, env, shared));
    if (python) glooRuns.push(await benchGloo(world, python, sizes, warmup, iters));
  }
  const pool = (rs: SizeTimes[][], inShared = false) =>
    sizes.map((mib) => ({
      mib,
      ...(inShared ? { shared: true } : {}),
      times: rs.flatMap((r) => r.find((x) => x.mib === mib && !x.shared === !inShared)!.times),
    }));
  const dtrainRuns = runs.map((r) => r.sizes);
  return {
    world,
    dtrain: shared
      ? pool(dtrainRuns).flatMap((d, i) => [d, pool(dtrainRuns, true)[i]!])
      : pool(dtrainRuns),
    gloo: python ? pool(glooRuns) : null,
    barrierUs: median(runs.map((r) => r.barrierUs)),
    tinyAllReduceUs: median(runs.map((r) => r.tinyAllReduceUs)),
    memcpyAllGBs: runs[0]!.memcpyAllGBs === undefined
      ? undefined
      : median(runs.map((r) => r.memcpyAllGBs!)),
    inPlaceAllGBs: runs[0]!.inPlaceAllGBs === undefined
      ? undefined
      : median(runs.map((r) => r.inPlaceAllGBs!)),
  };
}

/** busbw an in-place allReduce of 2 ranks cannot pass: the higher all-ranks bandwidth / 4. */
function ceilingOf(r: WorldResult): number | undefined {
  if (r.memcpyAllGBs === undefined || r.inPlaceAllGBs === undefined) return undefined;
  return Math.max(r.memcpyAllGBs, r.inPlaceAllGBs) / 4;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      worker: { type: "boolean", default: false },
      ranks: { type: "string", default: "2,4,8" },
      sizes: { type: "string", default: "1,16,64" },
      iters: { type: "string", default: "20" },
      warmup: { type: "string", default: "5" },
      chunk: { type: "string" },
      "spin-us": { type: "string" },
      "no-gloo": { type: "boolean", default: false },
      "copy-only": { type: "boolean", default: false },
      // the worker's flag: also time arrays in the shared region
      shared: { type: "boolean", default: false },
      // three runs by default: the table's spread then covers run-to-run variation too
      repeat: { type: "string", default: "3" },
      json: { type: "boolean", default: false },
    },
  });
  const sizes = values.sizes.split(",").map(Number);
  const iters = Number(values.iters), warmup = Number(values.warmup);
  if (values.worker) return worker(sizes, warmup, iters, values.shared);

  const env: Record<string, string> = {};
  if (values.chunk) env.DTRAIN_SHM_CHUNK_BYTES = values.chunk;
  if (values["spin-us"]) env.DTRAIN_SHM_SPIN_US = values["spin-us"];
  const repeat = Number(values.repeat);
  const python = values["no-gloo"] ? null : findTorchPython();
  const memcpyBefore = benchMemcpy();
  const results: WorldResult[] = [];
  for (const world of values.ranks.split(",").map(Number)) {
    results.push(
      await measureWorld(world, sizes, warmup, iters, repeat, python, env, !values["copy-only"]),
    );
  }
  // memcpy before and after the collectives: the reference is their mean
  const memcpy = (memcpyBefore + benchMemcpy()) / 2;

  if (values.json) {
    const loadavg = Deno.loadavg();
    console.log(JSON.stringify({ results, memcpyGBs: memcpy, loadavg }));
    return;
  }
  const fmt = (x: number | undefined, d = 2) => x === undefined ? "-" : x.toFixed(d);
  console.log(
    `allReduce(sum) f32, 1 thread per rank; ${warmup} warm-up + ${iters} timed calls ` +
      `x ${repeat} run(s), median; busbw = bytes / time x 2(n-1)/n`,
  );
  console.log(peerEnvLine());
  if (python) console.log(await torchPeerLine(python));
  console.log(
    "| ranks | size MiB | dtrain ms/call | dtrain busbw GB/s (p25–p75) | busbw / memcpy | busbw / ceiling | gloo ms/call | gloo busbw GB/s | ratio |",
  );
  console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of results) {
    for (const d of r.dtrain) {
      const g = r.gloo?.find((x) => x.mib === d.mib);
      const dms = median(d.times), gms = g ? median(g.times) : undefined;
      const dbw = busbw(r.world, d.mib, dms);
      const gbw = gms === undefined ? undefined : busbw(r.world, d.mib, gms);
      // the spread of the pooled calls (slow calls give the low bandwidth)
      const spread = `${fmt(busbw(r.world, d.mib, quantile(d.times, 0.75)))}–${
        fmt(busbw(r.world, d.mib, quantile(d.times, 0.25)))
      }`;
      const ceiling = ceilingOf(r);
      console.log(
        `| ${r.world} | ${d.mib}${d.shared ? " shared" : ""} | ${fmt(dms * 1e3, 3)} | ${
          fmt(dbw)
        } (${spread}) | ${fmt(dbw / memcpy)} | ${
          ceiling === undefined ? "-" : fmt(dbw / ceiling)
        } | ${fmt(gms === undefined ? undefined : gms * 1e3, 3)} | ` +
          `${fmt(gbw)} | ${gbw === undefined ? "-" : (dbw / gbw).toFixed(1) + "x"} |`,
      );
    }
  }
  if (!python) {
    console.log(
      values["no-gloo"]
        ? "gloo: skipped (--no-gloo)"
        : "gloo: skipped (no python3 here can import torch; set DTRAIN_BENCH_PYTHON)",
    );
  }
  console.log(
    `memcpy 256 MiB, 1 thread: ${memcpy.toFixed(2)} GB/s (read + written bytes / time; ` +
      `mean of before and after the collectives)`,
  );
  for (const r of results) {
    const ceiling = ceilingOf(r);
    if (ceiling === undefined) continue;
    console.log(
      `memcpy 256 MiB on each of the ${r.world} ranks at once: ${
        r.memcpyAllGBs!.toFixed(2)
      } GB/s ` +
        `together (${(r.memcpyAllGBs! / memcpy).toFixed(2)}x one thread alone); 256 MiB read and ` +
        `written in place on each at once: ${r.inPlaceAllGBs!.toFixed(2)} GB/s. An in-place ` +
        `allReduce reads and writes every byte of both ranks' buffers, so its busbw is at most ` +
        `the higher / 4 = ${ceiling.toFixed(2)} GB/s (the ceiling) = ${
          (ceiling / memcpy).toFixed(2)
        }x memcpy`,
    );
  }
  for (const r of results) {
    console.log(
      `dtrain latency, ${r.world} ranks, back to back: barrier ${r.barrierUs.toFixed(2)} µs, ` +
        `allReduce of 1 f32 ${r.tinyAllReduceUs.toFixed(2)} µs`,
    );
  }
  console.log(`load average: ${Deno.loadavg().map((x) => x.toFixed(2)).join(" ")}`);
}

if (import.meta.main) await main();
