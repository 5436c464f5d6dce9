/**
 * The original harness on 2 CPU ranks, dtrain against PyTorch DDP (gloo,
 * torchrun), side by side in one run, one thread per rank, alternating
 * trials: steady-state samples/s (steps 11..end, epoch-end checkpoints and
 * barriers included), launch → first finished optimizer step, and the whole
 * command's wall time. dtrain runs examples/toy_ddp.ts; PyTorch runs
 * ../shared/peers/pytorch/w1_toy.py through its torchrun_fix.py.
 *
 *   deno run -A scripts/bench_ddp.ts [--trials 3] [--peers DIR]
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const PYTHON = "/usr/bin/python3";

interface Sample {
  wallS: number;
  firstStepS: number;
  samplesPerS: number;
}

async function timed(
  cmd: string,
  args: string[],
  cwd: string,
  env: Record<string, string>,
): Promise<Sample> {
  const t0 = Date.now() / 1000;
  const out = await new Deno.Command(cmd, {
    args,
    cwd,
    env: { ...env, BENCH_LAUNCH_T: String(t0) },
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
  const lines = [...text.matchAll(/BENCH (\{.*\})/g)].map((m) => JSON.parse(m[1]!));
  const r0 = lines.find((l) => l.ss_samples_per_s !== undefined);
  if (!r0) throw new Error(`no BENCH line with samples/s in the output of ${cmd}:\n${text}`);
  return { wallS, firstStepS: r0.t_first_step - t0, samplesPerS: r0.ss_samples_per_s };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      trials: { type: "string", default: "3" },
      peers: { type: "string", default: join(ROOT, "..", "shared", "peers", "pytorch") },
    },
  });
  const tmp = Deno.makeTempDirSync({ prefix: "dtrain-bench-ddp-" });
  const ours: Sample[] = [], theirs: Sample[] = [];
  try {
    for (let t = 0; t < Number(values.trials); t++) {
      ours.push(
        await timed(
          join(ROOT, "dtrain"),
          [
            "--nproc",
            "2",
            "--threads",
            "1",
            "--run-dir",
            join(tmp, `d${t}`),
            join(ROOT, "examples/toy_ddp.ts"),
          ],
          tmp,
          {
            DTRAIN_BENCH: "1",
          },
        ),
      );
      try {
        theirs.push(
          await timed(
            PYTHON,
            [
              "torchrun_fix.py",
              "--nproc_per_node",
              "2",
              "--standalone",
              "w1_toy.py",
              "--ckpt-dir",
              tmp,
            ],
            values.peers!,
            {
              OMP_NUM_THREADS: "1",
              BENCH_TMP: tmp,
            },
          ),
        );
      } catch (e) {
        console.error(`PyTorch peer skipped: ${(e as Error).message.split("\n")[0]}`);
      }
    }
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
  const row = (
    name: string,
    pick: (s: Sample) => number,
    higherIsBetter: boolean,
    goal: string,
  ) => {
    const o = median(ours.map(pick));
    const p = theirs.length ? median(theirs.map(pick)) : NaN;
    const ratio = higherIsBetter ? o / p : p / o;
    return [
      name,
      o.toFixed(2),
      Number.isNaN(p) ? "n/a" : p.toFixed(2),
      Number.isNaN(p) ? "n/a" : `${ratio.toFixed(2)}x`,
      goal,
    ];
  };
  const rows = [
    ["quantity (2 ranks, 1 thread each)", "dtrain", "PyTorch DDP", "dtrain advantage", "goal"],
    row("steady-state samples/s", (s) => s.samplesPerS, true, ">= 3x"),
    row("launch -> first optimizer step (s)", (s) => s.firstStepS, false, ">= 3x"),
    row("whole command wall time (s)", (s) => s.wallS, false, ""),
  ];
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const r of rows) console.log(r.map((c, i) => c.padEnd(w[i]!)).join("  "));
  console.log(`(median of ${ours.length} dtrain and ${theirs.length} PyTorch trials, alternating)`);
}
