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
import { SFX_FILE_ENV } from "../os/install_layout.ts";
import { backend } from "../tensor/backend.ts";

/** The device bundle's name for the rank script, bundled beside this module (scripts/gpu_bundle.ts). */
export const BUNDLED_RANK_SCRIPT = "syncbn_rank.js";

/** How `dtrain --nproc 2 <rank script>` is started from where this module runs. */
export interface RankLaunch {
  /** the program and the arguments before dtrain's own */
  command: string;
  prefix: string[];
  rankScript: string;
}

/**
 * In a checkout (this module is TypeScript), cli.ts with the checkout's
 * deno.json and parity/syncbn_rank.ts; bundled (the device bundle's js/, run
 * by `dtrain exec`), the single file that runs this process and the rank
 * script bundled beside this module: the checkout's files are not there.
 *
 * @example
 * ```ts
 * rankLaunch("file:///b/js/chunk-x.js", { DTRAIN_SFX_FILE: "/b/dtrain" }).rankScript; // "/b/js/syncbn_rank.js"
 * ```
 */
export function rankLaunch(
  moduleUrl: string = import.meta.url,
  env: Record<string, string | undefined> = Deno.env.toObject(),
): RankLaunch {
  const at = (p: string) => fileURLToPath(new URL(p, moduleUrl));
  if (moduleUrl.endsWith(".ts")) {
    return {
      command: Deno.execPath(),
      prefix: ["run", "-A", "--config", at("../deno.json"), at("../cli.ts")],
      rankScript: at("./syncbn_rank.ts"),
    };
  }
  const self = env[SFX_FILE_ENV];
  if (!self) {
    throw new Error(
      `the SyncBatchNorm parity check runs bundled, but ${SFX_FILE_ENV} (the single file that ` +
        "starts ranks) is not set: run it with `dtrain exec`",
    );
  }
  return { command: self, prefix: [], rankScript: at(`./${BUNDLED_RANK_SCRIPT}`) };
}

/** Both ranks' rows for the fixture folder `dir` (a failed launch is one failing row with its output). */
export async function syncbnParityRows(dir: string, timeoutMs = 120_000): Promise<ParityRow[]> {
  const work = await Deno.makeTempDir({ prefix: "dtrain-syncbn-parity-" });
  try {
    const launch = rankLaunch();
    // a hung collective must not hold the check: DTRAIN_TIMEOUT (the device check sets 30 s) caps it
    const collectiveS = Math.min(
      Math.ceil(timeoutMs / 1000),
      Number(Deno.env.get("DTRAIN_TIMEOUT")) || Infinity,
    );
    const child = new Deno.Command(launch.command, {
      args: [
        ...launch.prefix,
        "--nproc",
        "2",
        // the ranks compute where this process does
        "--device",
        backend().device === "cpu" ? "cpu" : backend().kind,
        "--threads",
        "1",
        "--log-ranks",
        "all",
        "--timeout",
        String(collectiveS),
        "--run-dir",
        join(work, "run"),
        launch.rankScript,
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
