/**
 * Runs every comparison a PyTorch fixture folder supports and returns its
 * rows: the training recipes (toy_mlp, gpt_mini), the data order (sampler,
 * randperm, generator) and, when the folder has them, checkpoint imports.
 */
import { FixtureDir } from "./fixtures.ts";
import { type ParityRow, row } from "./report.ts";
import { toyParityRows } from "./toy_mlp.ts";
import { gptParityRows } from "./gpt_mini.ts";
import { checkRandpermFixtures, checkSamplerFixtures } from "./sampler.ts";

/** Which groups of comparisons to run (all by default). */
export type ParityGroup = "toy" | "gpt" | "sampler" | "checkpoint";

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
    const exact = (
      r: { case: string; ok: boolean; detail: string },
      quantity: string,
    ) =>
      row(
        r.case,
        quantity,
        "mismatches",
        r.ok ? 0 : 1,
        0,
        r.ok ? undefined : r.detail,
      );
    if (fx.has("sampler.json")) {
      for (const r of checkSamplerFixtures(dir)) {
        rows.push(exact(r, "indices per rank"));
      }
    }
    if (fx.has("randperm.json")) {
      for (const r of checkRandpermFixtures(dir)) {
        rows.push(exact(r, "values"));
      }
    }
  }
  if (want("checkpoint")) {
    const { checkpointParityRows } = await import("./checkpoints.ts");
    rows.push(...checkpointParityRows(fx));
  }
  return rows;
}
