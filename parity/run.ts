/**
 * Runs every comparison a PyTorch fixture folder supports and returns its
 * rows: the training recipes (toy_mlp, gpt_mini), the data order (sampler,
 * randperm, generator) and, when the folder has them, checkpoint imports.
 */
import { FixtureDir } from "./fixtures.ts";
import type { ParityRow } from "./report.ts";
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
    if (fx.has("sampler.json")) rows.push(...checkSamplerFixtures(dir));
    if (fx.has("randperm.json")) rows.push(...checkRandpermFixtures(dir));
  }
  if (want("checkpoint")) {
    const { checkpointParityRows } = await import("./checkpoints.ts");
    rows.push(...checkpointParityRows(fx));
  }
  return rows;
}
