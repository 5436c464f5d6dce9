/**
 * Benchmark of allReduce(sum) of f32 between two hosts: dtrain's Gloo process
 * group (started by the dtrain launcher, one per host) side by side with
 * PyTorch's gloo (torch.distributed, Debian's python3-torch) on the same
 * setup, in one run. The two hosts are two network namespaces joined by a
 * veth pair (scripts/netns.ts; needs root), or loopback with --loopback.
 *
 *   deno run -A scripts/bench_gloo.ts [--sizes 1,16,64] [--iters 20] [--warmup 5]
 *       [--layouts 2x1,2x2] [--repeat 1] [--loopback] [--json]
 *
 * Layouts are hosts x ranks per host. With 2 ranks per host dtrain runs twice:
 * with its shared-memory step within each host (DTRAIN_GLOO_HIERARCHY=on) and
 * all over Gloo (off); PyTorch's gloo has no such step.
 * Method (as scripts/bench_allreduce.ts and w3_allreduce.py): per size,
 * `warmup` calls, then `iters` calls each preceded by a barrier; a call's time
 * is the slowest rank's; the median is reported. With --repeat N the variants
 * run N times in turn (so all see the same machine load) and the calls are pooled. algbw = bytes / time; busbw =
 * algbw x 2(n-1)/n for n ranks (GB = 1e9 bytes); ratio = dtrain busbw /
 * PyTorch busbw.
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { initProcessGroup } from "../distributed/init_process_group.ts";
import { makeHosts, netnsProblem, removeHosts, type TwoHosts } from "./netns.ts";
import { peerCommandEnv, peerEnvLine, torchPeerLine } from "./peer_env.ts";

const SELF = fileURLToPath(import.meta.url);
const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** A job that runs longer than this is killed (a hang must not outlive the benchmark). */
const JOB_LIMIT_MS = 600_000;

interface SizeTimes {
  mib: number;
  /** seconds per timed call, slowest rank */
  times: number[];
}

/** What one run of a variant measures. */
interface Measured {
  sizes: SizeTimes[];
  /** µs per allReduce of one f32, back to back (rank 0's mean over TINY_CALLS) */
  tinyUs: number;
}

/** Back-to-back calls timed for the one-float latency. */
const TINY_CALLS = 500;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** One rank of the dtrain measurement (started by the launcher): rank 0 prints the times as JSON. */
function worker(sizes: number[], warmup: number, iters: number): void {
  using pg = initProcessGroup();
  const out: SizeTimes[] = [];
  for (const mib of sizes) {
    const t = new Float32Array((mib << 20) / 4).fill(1);
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
    const want = pg.size ** (warmup + iters);
    if (t[0] !== want || t[t.length - 1] !== want) {
      throw new Error(`wrong allReduce result: ${t[0]}, ${t[t.length - 1]}, expected ${want}`);
    }
    out.push({
      mib,
      times: Array.from(
        mine,
        (_, i) => Math.max(...Array.from({ length: pg.size }, (_, r) => all[r * iters + i]!)),
      ),
    });
  }
  const one = new Float32Array(1);
  for (let i = 0; i < 50; i++) pg.allReduce(one);
  pg.barrier("tiny");
  const t0 = performance.now();
  for (let i = 0; i < TINY_CALLS; i++) pg.allReduce(one);
  const tinyUs = ((performance.now() - t0) * 1000) / TINY_CALLS;
  const measured: Measured = { sizes: out, tinyUs };
  if (pg.rank === 0) console.log(`BENCH ${JSON.stringify(measured)}`);
}

/** Where the two "hosts" are: namespaces, or loopback. */
interface Place {
  what: string;
  addrs: readonly [string, string];
  prefix(host: 0 | 1): string[];
  iface: string | null;
}

function run(
  cmd: string[],
  env: Record<string, string>,
  peer = false,
): Promise<Deno.CommandOutput> {
  return new Deno.Command(cmd[0]!, {
    args: cmd.slice(1),
    ...(peer ? peerCommandEnv(env) : { env }),
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(JOB_LIMIT_MS),
  }).output();
}

function checked(o: Deno.CommandOutput, what: string): string {
  const text = new TextDecoder().decode(o.stdout);
  if (!o.success) {
    throw new Error(
      `${what} failed (exit ${o.code}):\n${text}\n${new TextDecoder().decode(o.stderr)}`,
    );
  }
  return text;
}

/** dtrain: one launcher per host, each starting `perHost` ranks of this script's worker. */
async function benchDtrain(
  place: Place,
  perHost: number,
  sizes: number[],
  warmup: number,
  iters: number,
  env: Record<string, string>,
  port: number,
): Promise<Measured> {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-bench-gloo-" });
  try {
    const token = join(dir, "token");
    Deno.writeTextFileSync(token, crypto.randomUUID().replaceAll("-", ""));
    Deno.chmodSync(token, 0o600);
    const launcher = (host: 0 | 1) => [
      ...place.prefix(host),
      Deno.execPath(),
      "run",
      "-A",
      "--config",
      join(ROOT, "deno.json"),
      join(ROOT, "cli.ts"),
      "--nnodes",
      "2",
      "--node-rank",
      String(host),
      "--nproc",
      String(perHost),
      "--threads",
      "1",
      "--master-addr",
      place.addrs[0],
      "--master-port",
      String(port),
      "--rdzv-token-file",
      token,
      "--run-dir",
      join(dir, "run"),
      SELF,
      "--worker",
      "--sizes",
      sizes.join(","),
      "--warmup",
      String(warmup),
      "--iters",
      String(iters),
    ];
    const ifname: Record<string, string> = place.iface ? { GLOO_SOCKET_IFNAME: place.iface } : {};
    const [o0, o1] = await Promise.all([
      run(launcher(0), { ...env, ...ifname }),
      run(launcher(1), { ...env, ...ifname }),
    ]);
    checked(o1, "dtrain host 1");
    const out = checked(o0, "dtrain host 0");
    const line = out.split("\n").find((l) => l.includes("BENCH "));
    if (!line) throw new Error(`dtrain printed no result:\n${out}`);
    return JSON.parse(line.slice(line.indexOf("BENCH ") + 6));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

/** PyTorch's gloo rank (w3_allreduce.py's loop and the back-to-back latency), shared with bench_allreduce. */
const TORCH_RANK = fileURLToPath(new URL("peers/gloo_allreduce.py", import.meta.url));

/** Debian's python3 with python3-torch (a pyenv python3 on PATH may lack torch). */
function findTorchPython(): string | null {
  const env = Deno.env.get("DTRAIN_BENCH_PYTHON");
  for (const py of env ? [env] : ["/usr/bin/python3", "python3"]) {
    try {
      const ok = new Deno.Command(py, {
        args: ["-c", "import torch.distributed"],
        stdout: "null",
        stderr: "null",
      }).outputSync().success;
      if (ok) return py;
    } catch { /* not installed: try the next */ }
  }
  return null;
}

async function benchTorch(
  python: string,
  place: Place,
  perHost: number,
  sizes: number[],
  warmup: number,
  iters: number,
  port: number,
): Promise<Measured> {
  const world = 2 * perHost;
  const outs = await Promise.all(Array.from({ length: world }, (_, r) => {
    const host = Math.floor(r / perHost) as 0 | 1;
    return run(
      [
        ...place.prefix(host),
        python,
        TORCH_RANK,
        sizes.join(","),
        String(warmup),
        String(iters),
        String(TINY_CALLS),
      ],
      {
        RANK: String(r),
        WORLD_SIZE: String(world),
        LOCAL_RANK: String(r % perHost),
        MASTER_ADDR: place.addrs[0],
        MASTER_PORT: String(port),
        OMP_NUM_THREADS: "1",
        ...(place.iface ? { GLOO_SOCKET_IFNAME: place.iface } : {}),
      },
      true,
    );
  }));
  outs.forEach((o, r) => checked(o, `PyTorch rank ${r}`));
  const out = new TextDecoder().decode(outs[0]!.stdout);
  const line = out.split("\n").find((l) => l.startsWith("BENCH "))!;
  return JSON.parse(line.slice(6));
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      worker: { type: "boolean", default: false },
      sizes: { type: "string", default: "1,16,64" },
      iters: { type: "string", default: "20" },
      warmup: { type: "string", default: "5" },
      layouts: { type: "string", default: "2x1,2x2" },
      repeat: { type: "string", default: "1" },
      loopback: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
    },
  });
  const sizes = values.sizes.split(",").map(Number);
  const iters = Number(values.iters), warmup = Number(values.warmup);
  if (values.worker) return worker(sizes, warmup, iters);
  const layouts = values.layouts.split(",").map((l) => {
    const m = /^2x([1-9]\d*)$/.exec(l.trim());
    if (!m) throw new RangeError(`--layouts: "${l}" is not 2xN (two hosts, N ranks each)`);
    return Number(m[1]);
  });

  const problem = values.loopback ? "--loopback" : netnsProblem();
  let hosts: TwoHosts | null = null;
  let place: Place;
  if (problem === null) {
    hosts = makeHosts();
    const h = hosts;
    place = {
      what: `two network namespaces joined by a veth pair (${
        h.addrs.join(" <-> ")
      }, GLOO_SOCKET_IFNAME=${h.iface})`,
      addrs: h.addrs,
      prefix: (i) => h.prefix(i),
      iface: h.iface,
    };
  } else {
    place = {
      what: `loopback (no namespaces: ${problem})`,
      addrs: ["127.0.0.1", "127.0.0.1"],
      prefix: () => [],
      iface: null,
    };
  }
  const python = findTorchPython();
  const results: Record<string, Record<string, SizeTimes[]>> = {};
  const tiny: Record<string, Record<string, number[]>> = {};
  const add = (layout: string, name: string, got: Measured) => {
    const into = (results[layout] ??= {})[name] ??= sizes.map((mib) => ({ mib, times: [] }));
    for (const g of got.sizes) into.find((x) => x.mib === g.mib)!.times.push(...g.times);
    ((tiny[layout] ??= {})[name] ??= []).push(got.tinyUs);
  };
  let port = 29611;
  try {
    for (let rep = 0; rep < Number(values.repeat); rep++) {
      for (const perHost of layouts) {
        const key = `2x${perHost}`;
        const variants: [string, Record<string, string>][] = perHost > 1
          ? [["dtrain (shm + Gloo)", { DTRAIN_GLOO_HIERARCHY: "on" }], [
            "dtrain (Gloo only)",
            { DTRAIN_GLOO_HIERARCHY: "off" },
          ]]
          : [["dtrain", {}]];
        for (const [name, env] of variants) {
          add(key, name, await benchDtrain(place, perHost, sizes, warmup, iters, env, port++));
        }
        if (python) {
          add(
            key,
            "PyTorch gloo",
            await benchTorch(python, place, perHost, sizes, warmup, iters, port++),
          );
        }
      }
    }
  } finally {
    if (hosts) removeHosts(hosts);
  }
  if (values.json) {
    console.log(JSON.stringify({ place: place.what, results, tiny, loadavg: Deno.loadavg() }));
    return;
  }
  console.log(
    `allReduce(sum) f32 between ${place.what}; 1 thread per rank; ${warmup} warm-up + ${iters} timed ` +
      `calls x ${values.repeat} run(s), median of the slowest rank` +
      (python ? "" : "; PyTorch not found (no python3-torch)"),
  );
  console.log(peerEnvLine());
  if (python) console.log(await torchPeerLine(python));
  for (const [layout, byName] of Object.entries(results)) {
    const n = 2 * Number(layout.slice(2));
    const busbw = (mib: number, s: number) => ((mib * 2 ** 20) / s) * (2 * (n - 1) / n) / 1e9;
    const names = Object.keys(byName);
    const torch = byName["PyTorch gloo"];
    console.log(
      `\n${layout} (${n} ranks): busbw GB/s${torch ? ", and ratio to PyTorch's gloo" : ""}`,
    );
    console.log(
      `| size MiB | ${names.join(" | ")} |${torch ? " ratio |".repeat(names.length - 1) : ""}`,
    );
    console.log(`|---:|${"---:|".repeat(names.length + (torch ? names.length - 1 : 0))}`);
    for (const mib of sizes) {
      const bw = names.map((nm) =>
        busbw(mib, median(byName[nm]!.find((x) => x.mib === mib)!.times))
      );
      const t = torch ? bw[names.indexOf("PyTorch gloo")]! : null;
      const ratios = t === null ? [] : bw.slice(0, -1).map((b) => `${(b / t).toFixed(2)}x`);
      console.log(
        `| ${mib} | ${bw.map((b) => b.toFixed(3)).join(" | ")} |${
          ratios.map((r) => ` ${r} |`).join("")
        }`,
      );
    }
    const us = names.map((nm) => median(tiny[layout]![nm]!));
    console.log(`| 1 f32: µs/call | ${us.map((u) => u.toFixed(0)).join(" | ")} |`);
  }
}

if (import.meta.main) await main();
