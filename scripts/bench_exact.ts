/**
 * The cost of exact mode: toy DDP and GPT-mini DDP on 2 CPU ranks, normal
 * against exact mode (8 canonical shards), side by side in one run with
 * alternating trials, one thread per rank. Both modes run the same loop
 * (scripts/exact_workload.ts) on the same samples; the slowdown is the
 * normal mode's median rate over the exact mode's (goal: at most 1.3× on
 * GPT-mini). The load average is printed at the start and the end: the
 * machine is shared, and load compresses or stretches every figure.
 *
 *   deno run -A scripts/bench_exact.ts [--trials 3] [--workloads toy,gpt] [--shards 8]
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const RATE = { toy: "samples_per_s", gpt: "tokens_per_s" } as const;
const UNIT = { toy: "samples/s (steps 11..300)", gpt: "tokens/s (steps 11..60)" } as const;
type Workload = keyof typeof RATE;

/** One 2-rank run of the workload; resolves to rank 0's steady rate. */
async function trial(workload: Workload, exact: number | null, tmp: string): Promise<number> {
  const args = [
    "--nproc",
    "2",
    "--threads",
    "1",
    "--run-dir",
    join(tmp, `${workload}-${exact ?? "normal"}-${crypto.randomUUID().slice(0, 8)}`),
    join(ROOT, "scripts/exact_workload.ts"),
    "--workload",
    workload,
    ...(exact === null ? [] : ["--exact", String(exact)]),
  ];
  const out = await new Deno.Command(join(ROOT, "dtrain"), {
    args,
    cwd: tmp,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(
      `dtrain ${args.join(" ")} failed:\n${text}\n${new TextDecoder().decode(out.stderr)}`,
    );
  }
  const m = /BENCH (\{.*\})/.exec(text);
  if (!m) throw new Error(`no BENCH line in the output of dtrain ${args.join(" ")}:\n${text}`);
  return JSON.parse(m[1]!)[RATE[workload]];
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const load = () => Deno.loadavg().map((l) => l.toFixed(1)).join(" ");

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      trials: { type: "string", default: "3" },
      workloads: { type: "string", default: "toy,gpt" },
      shards: { type: "string", default: "8" },
    },
  });
  const trials = Number(values.trials), shards = Number(values.shards);
  const workloads = values.workloads!.split(",") as Workload[];
  for (const w of workloads) {
    if (!(w in RATE)) throw new RangeError(`--workloads: ${w} is not toy or gpt`);
  }
  const tmp = Deno.makeTempDirSync({ prefix: "dtrain-bench-exact-" });
  try {
    console.log(`load average at the start: ${load()}`);
    for (const w of workloads) {
      const normal: number[] = [], exact: number[] = [];
      for (let t = 0; t < trials; t++) {
        // alternating, so a change of load touches both modes alike
        normal.push(await trial(w, null, tmp));
        exact.push(await trial(w, shards, tmp));
      }
      const [n, e] = [median(normal), median(exact)];
      const fmt = (xs: number[]) =>
        xs.map((x) => Math.round(x).toLocaleString("en-US")).join(" / ");
      console.log(`${w}: ${UNIT[w]}, 2 ranks, ${trials} trials each`);
      console.log(`  normal ${fmt(normal)} (median ${Math.round(n).toLocaleString("en-US")})`);
      console.log(
        `  exact  ${fmt(exact)} (median ${
          Math.round(e).toLocaleString("en-US")
        }, ${shards} shards)`,
      );
      console.log(`  slowdown ${(n / e).toFixed(2)}× (goal ≤ 1.3× on GPT-mini)`);
      console.log(
        `BENCH ${JSON.stringify({ workload: w, normal: n, exact: e, slowdown: n / e, shards })}`,
      );
    }
    console.log(`load average at the end: ${load()}`);
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
}
