/**
 * DDP on 2 CPU ranks, dtrain against PyTorch DDP (gloo, torchrun), side by
 * side in one run, one thread per rank, alternating trials. Two workloads:
 * - toy: the original harness; dtrain runs examples/toy_ddp.ts, PyTorch
 *   scripts/peers/pytorch/w1_toy.py: steady-state samples/s (steps 11..end,
 *   epoch-end checkpoints and barriers included), launch → first finished
 *   optimizer step, and the whole command's wall time;
 * - gpt: GPT-mini on the fortunes corpus, 60 steps of 16 x 128 tokens per
 *   rank; dtrain runs examples/char_gpt.ts, PyTorch w2_gpt.py: tokens/s over
 *   steps 11..60 (needs Debian's fortunes package).
 *
 * Then one more dtrain toy run under DTRAIN_PROFILE=1 prints where each
 * rank's start-up and steps went.
 *
 *   deno run -A scripts/bench_ddp.ts [--trials 3] [--workloads toy,gpt] [--peers DIR]
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { peerCommandEnv, peerEnvLine, torchPeerLine } from "./peer_env.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const PYTHON = "/usr/bin/python3";

interface Sample {
  wallS: number;
  firstStepS: number;
  /** samples/s (toy) or tokens/s (gpt) */
  rate: number;
  /** gpt: the arithmetic of one token's training step (the same model in both programs) */
  flopsPerToken?: number;
  /** toy, dtrain: each rank's CPU per steady step, µs (main thread, whole process), by rank */
  cpu?: { main: number; process: number }[];
}

interface Workload {
  /** dtrain's script and its arguments */
  dtrain: string[];
  /** the PyTorch peer's script and its arguments (run by torchrun_fix.py), given a scratch folder */
  torch: (tmp: string) => string[];
  /** the BENCH field holding the rate */
  rateField: string;
  rateName: string;
}

/** examples/toy_ddp.ts: 64 samples per rank and step, 2 ranks. */
const TOY_SAMPLES_PER_STEP = 128;

const WORKLOADS: Record<string, Workload> = {
  toy: {
    dtrain: ["examples/toy_ddp.ts"],
    torch: (tmp) => ["w1_toy.py", "--ckpt-dir", tmp],
    rateField: "ss_samples_per_s",
    rateName: "toy DDP steady-state samples/s",
  },
  gpt: {
    dtrain: ["examples/char_gpt.ts", "60"],
    torch: () => ["w2_gpt.py", "--steps", "60"],
    rateField: "tokens_per_s",
    rateName: "GPT-mini DDP tokens/s (steps 11..60)",
  },
};

/**
 * A run's BENCH lines: rank 0's (the one with `rateField`; lines without a rank are rank 0's) and
 * every rank's CPU per steady step, in rank order (none when the script reports none).
 */
export function parseBenchOutput(text: string, rateField: string, cmd = "the script"): {
  r0: Record<string, number>;
  cpu: { main: number; process: number }[];
} {
  const lines = [...text.matchAll(/BENCH (\{.*\})/g)].map((m) => JSON.parse(m[1]!));
  const r0 = lines.find((l) => l[rateField] !== undefined && (l.rank ?? 0) === 0);
  if (!r0) throw new Error(`no BENCH line with ${rateField} in the output of ${cmd}:\n${text}`);
  const cpu = lines.filter((l) => l.cpu_main_us_per_step !== undefined)
    .sort((a, b) => a.rank - b.rank)
    .map((l) => ({ main: l.cpu_main_us_per_step, process: l.cpu_process_us_per_step }));
  return { r0, cpu };
}

async function timed(
  cmd: string,
  args: string[],
  cwd: string,
  env: Record<string, string>,
  rateField: string,
  peer = false,
): Promise<Sample> {
  const t0 = Date.now() / 1000;
  const launchEnv = { ...env, BENCH_LAUNCH_T: String(t0) };
  const out = await new Deno.Command(cmd, {
    args,
    cwd,
    ...(peer ? peerCommandEnv(launchEnv) : { env: launchEnv }),
    stderr: "piped",
  })
    .output();
  const wallS = Date.now() / 1000 - t0;
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(
      `${cmd} ${args.join(" ")} failed:\n${text}\n${new TextDecoder().decode(out.stderr)}`,
    );
  }
  const { r0, cpu } = parseBenchOutput(text, rateField, cmd);
  return {
    wallS,
    firstStepS: r0.t_first_step - t0,
    rate: r0[rateField],
    flopsPerToken: r0.flops_per_token,
    ...(cpu.length ? { cpu } : {}),
  };
}

/** The [profile] lines of one toy run with DTRAIN_PROFILE=1. */
async function profiledToyRun(tmp: string): Promise<string[]> {
  const out = await new Deno.Command(join(ROOT, "dtrain"), {
    args: [
      "--nproc",
      "2",
      "--threads",
      "1",
      "--run-dir",
      join(tmp, "profiled"),
      join(ROOT, "examples/toy_ddp.ts"),
    ],
    cwd: tmp,
    env: { DTRAIN_PROFILE: "1" },
    stdout: "null",
    stderr: "piped",
  }).output();
  return new TextDecoder().decode(out.stderr).split("\n").filter((l) => l.includes("[profile]"));
}

/** The single-thread sgemm peak of this machine now: bench_gemm's best shape (null if it fails). */
async function sgemmPeak(): Promise<{ gflops: number; shape: string } | null> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", join(ROOT, "scripts/bench_gemm.ts"), "--json", "--seconds", "0.1"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    console.error(`bench_gemm failed: ${new TextDecoder().decode(out.stderr).trim()}`);
    return null;
  }
  const last = JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").at(-1)!);
  return { gflops: last.peakGflops, shape: last.peakShape };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** The 1-minute load average: how many threads wanted the machine's cores (2 here) meanwhile. */
function loadAverage(): string {
  try {
    return Deno.readTextFileSync("/proc/loadavg").split(" ")[0]!;
  } catch {
    return "n/a";
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      trials: { type: "string", default: "3" },
      workloads: { type: "string", default: "toy,gpt" },
      peers: { type: "string", default: join(ROOT, "scripts", "peers", "pytorch") },
    },
  });
  const tmp = Deno.makeTempDirSync({ prefix: "dtrain-bench-ddp-" });
  const loadAtStart = loadAverage();
  const rows = [[
    "quantity (2 ranks, 1 thread each)",
    "dtrain",
    "PyTorch DDP",
    "dtrain advantage",
    "goal",
  ]];
  const counts: string[] = [];
  let profile: string[] = [];
  try {
    for (const name of values.workloads!.split(",")) {
      const w = WORKLOADS[name];
      if (!w) throw new Error(`unknown workload ${name}: expected ${Object.keys(WORKLOADS)}`);
      const ours: Sample[] = [], theirs: Sample[] = [];
      for (let t = 0; t < Number(values.trials); t++) {
        ours.push(
          await timed(
            join(ROOT, "dtrain"),
            [
              "--nproc",
              "2",
              "--threads",
              "1",
              "--log-ranks",
              "all", // every rank's BENCH line: its CPU per step
              "--run-dir",
              join(tmp, `${name}${t}`),
              join(ROOT, w.dtrain[0]!),
              ...w.dtrain.slice(1),
            ],
            tmp,
            { DTRAIN_BENCH: "1" },
            w.rateField,
          ),
        );
        try {
          theirs.push(
            await timed(
              PYTHON,
              ["torchrun_fix.py", "--nproc_per_node", "2", "--standalone", ...w.torch(tmp)],
              values.peers!,
              { OMP_NUM_THREADS: "1", BENCH_TMP: tmp },
              w.rateField,
              true,
            ),
          );
        } catch (e) {
          console.error(`PyTorch peer skipped: ${(e as Error).message.split("\n")[0]}`);
        }
      }
      const row = (
        label: string,
        pick: (s: Sample) => number,
        higherIsBetter: boolean,
        goal: string,
        digits = 2,
      ) => {
        const o = median(ours.map(pick));
        const p = theirs.length ? median(theirs.map(pick)) : NaN;
        const ratio = higherIsBetter ? o / p : p / o;
        return [
          label,
          o.toFixed(digits),
          Number.isNaN(p) ? "n/a" : p.toFixed(digits),
          Number.isNaN(p) ? "n/a" : `${ratio.toFixed(2)}x`,
          goal,
        ];
      };
      if (name === "toy") {
        rows.push(row(w.rateName, (s) => s.rate, true, ">= 6x", 0));
        rows.push(
          row("launch -> first optimizer step (s)", (s) => s.firstStepS, false, "<= 0.3 s"),
        );
        rows.push(row("whole command wall time (s)", (s) => s.wallS, false, ""));
        // What each rank asked of the cores per steady step, whatever the machine's load, and the
        // limit that sets: with the machine to themselves, the ranks (2 ranks on 2 cores here, V8's
        // helper threads beside them) cannot step faster than the busier rank's whole process.
        const ranks = ours[0]?.cpu?.length ?? 0;
        let busiest = 0;
        for (let r = 0; r < ranks; r++) {
          const main = median(ours.map((s) => s.cpu?.[r]?.main ?? NaN));
          const proc = median(ours.map((s) => s.cpu?.[r]?.process ?? NaN));
          busiest = Math.max(busiest, proc);
          rows.push([
            `  rank ${r} CPU per steady step, main thread / process (µs)`,
            `${main.toFixed(0)} / ${proc.toFixed(0)}`,
            "",
            "",
            "",
          ]);
        }
        if (busiest > 0) {
          const ceiling = (TOY_SAMPLES_PER_STEP / busiest) * 1e6;
          const peer = theirs.length ? median(theirs.map((s) => s.rate)) : NaN;
          rows.push([
            "  limit: samples/s at that CPU per step, a core per rank",
            ceiling.toFixed(0),
            "",
            Number.isNaN(peer) ? "n/a" : `${(ceiling / peer).toFixed(2)}x`,
            "",
          ]);
        }
      } else {
        rows.push(row(w.rateName, (s) => s.rate, true, ">= 3x", 0));
        // What the rates ask of each rank's core, in the units of bench_gemm's sgemm peak: the
        // peer trains the same model, so dtrain's FLOPs per token count for both.
        const fpt = ours[0]?.flopsPerToken;
        if (fpt) {
          const gflops = (s: Sample) => (s.rate / 2) * fpt / 1e9;
          rows.push(row("  GFLOP/s per rank (6N + 6LCT per token)", gflops, true, "", 1));
          // the goal is a fraction of this machine's single-thread sgemm peak, measured now
          const peak = await sgemmPeak();
          if (peak !== null) {
            const ourRank = median(ours.map(gflops));
            rows.push([
              `  per rank / sgemm peak (${peak.gflops.toFixed(1)} GFLOP/s, ${peak.shape})`,
              `${(100 * ourRank / peak.gflops).toFixed(0)}%`,
              "",
              "",
              ">= 75%",
            ]);
          }
          const peer = theirs.length ? median(theirs.map(gflops)) : NaN;
          if (!Number.isNaN(peer)) {
            rows.push([
              "  3x PyTorch asks per rank (GFLOP/s)",
              (3 * peer).toFixed(1),
              "",
              "",
              "vs sgemm peak",
            ]);
          }
        }
      }
      counts.push(`${name}: ${ours.length} dtrain and ${theirs.length} PyTorch trials`);
    }
    if (values.workloads!.split(",").includes("toy")) profile = await profiledToyRun(tmp);
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const r of rows) console.log(r.map((c, i) => c.padEnd(widths[i]!)).join("  "));
  console.log(`(median of ${counts.join(", ")}, alternating)`);
  console.log(`load average (1 min): ${loadAtStart} at the start, ${loadAverage()} at the end`);
  console.log(peerEnvLine());
  console.log(await torchPeerLine(PYTHON));
  if (profile.length) {
    console.log("\nDTRAIN_PROFILE=1 ./dtrain --nproc 2 --threads 1 examples/toy_ddp.ts:");
    for (const line of profile) console.log(line);
  }
}
