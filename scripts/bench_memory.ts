/**
 * Memory per rank and speed of each memory mode beside plain DDP, on N CPU
 * ranks (one native thread each): DDP, ZeRO-1 (optimizer state sharded),
 * ZeRO-2 (gradients too) and activation checkpointing (DDP with every GPT
 * block checkpointed), on GPT-mini (examples/char_gpt.ts's) and a larger GPT
 * (6 layers of 384) where the optimizer state outweighs the activations.
 * Each (model, mode) is one launch of scripts/bench_memory_rank.ts: DDP
 * buckets of 5 MiB, 2 warm-up steps, then BENCH_STEPS (4) measured; the bytes are the allocator's
 * counts by kind (tensor/memory_kinds.ts), the largest over the ranks.
 *
 *   deno run -A scripts/bench_memory.ts --ranks 2 [--models mini,large]
 *
 * Prints a table, then as its last line one JSON object for scripts, of the
 * larger model: {"modes": {"ddp"|"zero1"|"zero2"|"checkpointing":
 * {"optimizerStateBytesPerRank", "gradientBytesPerRank", "peakBytesPerRank", "tokensPerS"}}}
 * (gradientBytesPerRank: the gradients held when the optimizer steps).
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { formatBytes } from "../tensor/memory_kinds.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const MODES = ["ddp", "zero1", "zero2", "checkpointing"] as const;
type Mode = typeof MODES[number];

interface RankResult {
  rank: number;
  parameters: number;
  optimizerStateBytes: number;
  gradientBytesAtStep: number;
  gradientPeakBytes: number;
  activationPeakBytes: number;
  communicationPeakBytes: number;
  peakBytes: number;
  tokensPerS: number;
}

const { values } = parseArgs({
  options: {
    ranks: { type: "string", default: "2" },
    models: { type: "string", default: "mini,large" },
  },
});
const ranks = Number(values.ranks);
if (!Number.isInteger(ranks) || ranks < 1) throw new Error(`--ranks must be a positive integer`);
const models = values.models!.split(",");

async function launch(mode: Mode, model: string): Promise<RankResult[]> {
  const runDir = Deno.makeTempDirSync({ prefix: "dtrain-bench-memory-" });
  try {
    const out = await new Deno.Command(join(ROOT, "dtrain"), {
      args: [
        "--nproc",
        String(ranks),
        "--threads",
        "1",
        "--log-ranks",
        "all",
        "--run-dir",
        runDir,
        join(ROOT, "scripts/bench_memory_rank.ts"),
        mode,
        model,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    if (out.code !== 0) {
      throw new Error(`${mode} ${model} failed:\n${text}${new TextDecoder().decode(out.stderr)}`);
    }
    const rows = [...text.matchAll(/^\[r\d+\] (\{"rank".*\})$/gm)].map((m) => JSON.parse(m[1]!));
    if (rows.length !== ranks) {
      throw new Error(`${mode} ${model}: ${rows.length} results:\n${text}`);
    }
    return rows;
  } finally {
    Deno.removeSync(runDir, { recursive: true });
  }
}

const max = (rs: RankResult[], k: keyof RankResult) => Math.max(...rs.map((r) => r[k]));
const results = new Map<string, Map<Mode, RankResult[]>>();
for (const model of models) {
  const byMode = new Map<Mode, RankResult[]>();
  for (const mode of MODES) byMode.set(mode, await launch(mode, model));
  results.set(model, byMode);
}

const load = Deno.loadavg().map((l) => l.toFixed(1)).join(" ");
console.log(
  `memory per rank (largest over ${ranks} CPU ranks, 1 thread each), ${
    new Date().toISOString()
  }, load ${load}`,
);
for (const [model, byMode] of results) {
  const ddp = byMode.get("ddp")!;
  console.log(`\n${model}: ${ddp[0]!.parameters.toLocaleString("en")} parameters`);
  console.log(
    "mode           optimizer state   gradients at step   gradient peak   activation peak   comm. peak   peak total        tokens/s (× DDP)",
  );
  for (const [mode, rs] of byMode) {
    const ratio = (k: keyof RankResult) => max(rs, k) / max(ddp, k);
    const cell = (k: keyof RankResult, w: number) =>
      `${formatBytes(max(rs, k))}${mode === "ddp" ? "" : ` ${ratio(k).toFixed(2)}×`}`.padEnd(w);
    console.log(
      mode.padEnd(15) + cell("optimizerStateBytes", 18) + cell("gradientBytesAtStep", 20) +
        cell("gradientPeakBytes", 16) + cell("activationPeakBytes", 18) +
        formatBytes(max(rs, "communicationPeakBytes")).padEnd(13) + cell("peakBytes", 18) +
        `${rs[0]!.tokensPerS.toFixed(0)} (${(rs[0]!.tokensPerS / ddp[0]!.tokensPerS).toFixed(2)}×)`,
    );
  }
}
const last = results.get(models.at(-1)!)!;
console.log(JSON.stringify({
  modes: Object.fromEntries(
    MODES.map((mode) => {
      const rs = last.get(mode)!;
      return [mode, {
        optimizerStateBytesPerRank: max(rs, "optimizerStateBytes"),
        gradientBytesPerRank: max(rs, "gradientBytesAtStep"),
        peakBytesPerRank: max(rs, "peakBytes"),
        tokensPerS: rs[0]!.tokensPerS,
      }];
    }),
  ),
}));
