/**
 * Parity of PyTorch checkpoint import: every torch.save file of the fixture
 * folder loads into the same tensors as its safetensors twin, bit for bit.
 */
import type { FixtureDir } from "./fixtures.ts";
import type { ParityRow } from "./report.ts";

/** Rows for the ckpt_* files (none until the torch.save reader lands). */
export function checkpointParityRows(_fx: FixtureDir): ParityRow[] {
  return [];
}
