/**
 * Parity of SyncBatchNorm on two ranks (fixtures/syncbn.json): starts
 * `dtrain --nproc 2 parity/syncbn_rank.ts` and collects both ranks' rows.
 * The reference is PyTorch's batch norm over both ranks' batches at once
 * (what SyncBatchNorm computes; see scripts/peers/ops_fixtures.py), with
 * unequal batch sizes and two steps, momentum 0.1 and the cumulative average.
 *
 * Tolerances (relative L2, f32): the outputs and eval outputs are
 * x·alpha + beta with statistics summed in double on both sides: a few
 * roundings, 1e-6 (statistics of one rank alone err by ~1e-1). Input
 * gradients subtract two all-reduced means (cancellation) and weight/bias
 * gradients sum this rank's M products: 1e-5. Running statistics are
 * averages of double statistics: 1e-6; num_batches_tracked exactly.
 */
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import type { ParityRow } from "./report.ts";
import { row } from "./report.ts";

const CLI = fileURLToPath(new URL("../cli.ts", import.meta.url));
const CONFIG = fileURLToPath(new URL("../deno.json", import.meta.url));
const RANK_SCRIPT = fileURLToPath(new URL("./syncbn_rank.ts", import.meta.url));

/** Both ranks' rows for the fixture folder `dir` (a failed launch is one failing row with its output). */
export async function syncbnParityRows(dir: string, timeoutMs = 120_000): Promise<ParityRow[]> {
  const work = await Deno.makeTempDir({ prefix: "dtrain-syncbn-parity-" });
  try {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        CONFIG,
        CLI,
        "--nproc",
        "2",
        "--threads",
        "1",
        "--log-ranks",
        "all",
        "--timeout",
        String(Math.ceil(timeoutMs / 1000)),
        "--run-dir",
        join(work, "run"),
        RANK_SCRIPT,
        dir,
      ],
      cwd: work,
      env: { NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const timer = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch { /* already gone */ }
    }, timeoutMs);
    const out = await child.output();
    clearTimeout(timer);
    const text = new TextDecoder().decode(out.stdout), err = new TextDecoder().decode(out.stderr);
    const rows = [...text.matchAll(/\{"syncbnRows":.*\}/g)].flatMap((m) =>
      JSON.parse(m[0]).syncbnRows as ParityRow[]
    );
    const ranks = new Set(rows.map((r) => r.case.replace(/.* rank /, "")));
    if (out.code !== 0 || ranks.size !== 2) {
      return [
        row(
          "syncbn",
          "two ranks ran",
          "exit code",
          out.code || 1,
          0,
          (text + err).trim().slice(-2000),
        ),
      ];
    }
    return rows;
  } finally {
    await Deno.remove(work, { recursive: true });
  }
}
