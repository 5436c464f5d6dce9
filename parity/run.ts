/**
 * Runs every comparison a PyTorch fixture folder supports and returns its
 * rows: the training recipes (toy_mlp, gpt_mini), the data order (sampler,
 * randperm, generator), when the folder has them checkpoint imports, and the
 * convolutional-network ops, CNN and SyncBatchNorm of the repository's own
 * fixtures/ (or of the folder, when it holds a set of them).
 */
import { FixtureDir, repoFixtureDir } from "./fixtures.ts";
import { opsParityRows } from "./ops.ts";
import { cnnParityRows } from "./cnn.ts";
import { syncbnParityRows } from "./syncbn.ts";
import { backend } from "../tensor/backend.ts";
import { CUDA_PENDING_SYMBOLS } from "../ffi/symbols.ts";
import type { ParityRow } from "./report.ts";
import { toyParityRows } from "./toy_mlp.ts";
import { gptParityRows } from "./gpt_mini.ts";
import { checkRandpermFixtures, checkSamplerFixtures } from "./sampler.ts";

/** Which groups of comparisons to run (all by default). */
export type ParityGroup = "toy" | "gpt" | "sampler" | "checkpoint" | "ops" | "cnn" | "syncbn";

/** The groups that the current device cannot run yet, with why (null: none). */
export function groupsSkippedOnDevice(): { groups: ParityGroup[]; why: string } | null {
  if (backend().device !== "cuda" || CUDA_PENDING_SYMBOLS.size === 0) return null;
  return {
    groups: ["ops", "cnn", "syncbn"],
    why:
      `the CUDA library does not have ${CUDA_PENDING_SYMBOLS.size} of their kernels yet (ffi/symbols.ts CUDA_PENDING_SYMBOLS)`,
  };
}

/** Every row for a fixture folder. */
export async function parityRows(
  dir: string,
  groups?: ParityGroup[],
): Promise<ParityRow[]> {
  const fx = new FixtureDir(dir);
  const want = (g: ParityGroup) => !groups || groups.includes(g);
  const rows: ParityRow[] = [];
  if (want("toy") && fx.has("toy_mlp.json")) rows.push(...toyParityRows(fx));
  if (want("gpt") && fx.has("gpt_mini.json")) rows.push(...gptParityRows(fx));
  if (want("sampler")) {
    if (fx.has("sampler.json")) rows.push(...checkSamplerFixtures(dir));
    if (fx.has("randperm.json")) rows.push(...checkRandpermFixtures(dir));
  }
  if (want("checkpoint")) {
    const { checkpointParityRows } = await import("./checkpoints.ts");
    rows.push(...checkpointParityRows(fx));
  }
  const skipped = groupsSkippedOnDevice()?.groups ?? [];
  const ops = fx.has("ops.json") ? fx : new FixtureDir(repoFixtureDir());
  if (want("ops") && !skipped.includes("ops") && ops.has("ops.json")) {
    rows.push(...opsParityRows(ops));
  }
  if (want("cnn") && !skipped.includes("cnn") && ops.has("cnn.json")) {
    rows.push(...cnnParityRows(ops));
  }
  if (want("syncbn") && !skipped.includes("syncbn") && ops.has("syncbn.json")) {
    rows.push(...await syncbnParityRows(ops.dir));
  }
  return rows;
}
