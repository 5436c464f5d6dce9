/**
 * Parity of PyTorch checkpoint import: every torch.save file of the fixture
 * folder loads into the same tensors as its safetensors twin, bit for bit,
 * and into a dtrain model with the matching architecture.
 */
import type { FixtureDir } from "./fixtures.ts";
import { type ParityRow, row } from "./report.ts";
import { readWeights } from "../nn/load.ts";
import { readSafetensorsFile } from "../io/safetensors.ts";
import { stripModulePrefix } from "../io/state_dict.ts";
import { join } from "node:path";
import { toyModelFromInit } from "./toy_mlp.ts";
import { gptMiniFromFixture } from "./gpt_mini.ts";
import { loadWeights } from "../nn/load.ts";

const TWINS: [string, string, string | undefined][] = [
  ["ckpt_state_dict.pt", "ckpt_state_dict.safetensors", undefined],
  ["ckpt_ddp_state_dict.pt", "ckpt_ddp_state_dict.safetensors", undefined],
  ["ckpt_state_dict_legacy.pt", "ckpt_state_dict.safetensors", undefined],
  ["ckpt_full.pt", "ckpt_full.safetensors", "model_state_dict"],
  ["ckpt_gpt_mini_state_dict.pt", "gpt_mini_params.safetensors", undefined],
];

/** Number of tensors that differ (missing, shape, dtype or any byte). */
function differences(
  a: Map<string, { dtype: string; shape: number[]; data: Uint8Array }>,
  b: typeof a,
): string[] {
  const out: string[] = [];
  for (const [k, tb] of b) {
    const ta = a.get(k);
    if (!ta) out.push(`${k} missing`);
    else if (ta.dtype !== tb.dtype || ta.shape.join() !== tb.shape.join()) {
      out.push(`${k} shape/dtype`);
    } else if (ta.data.length !== tb.data.length || ta.data.some((v, i) => v !== tb.data[i])) {
      out.push(`${k} bytes`);
    }
  }
  return out;
}

/** Rows for the ckpt_* files present in the folder. */
export function checkpointParityRows(fx: FixtureDir): ParityRow[] {
  const rows: ParityRow[] = [];
  for (const [pt, twin, key] of TWINS) {
    if (!fx.has(pt) || !fx.has(twin)) continue;
    const loaded = readWeights(join(fx.dir, pt), key ? { key } : {});
    let ref = stripModulePrefix(readSafetensorsFile(join(fx.dir, twin)).tensors);
    if (key) {
      const p = key + ".";
      ref = new Map(
        [...ref].filter(([k]) => k.startsWith(p)).map(([k, t]) => [k.slice(p.length), t]),
      );
    }
    const diff = differences(loaded, ref);
    rows.push(
      row(
        pt,
        `tensors vs ${twin}`,
        "differing",
        diff.length,
        0,
        diff.slice(0, 3).join(", ") || undefined,
      ),
    );
    // And into a dtrain model of the same architecture (strict key matching).
    let loadError = "";
    try {
      if (pt.includes("gpt_mini")) {
        const g = gptMiniFromFixture(fx, { maskBuffer: true });
        loadWeights(g, join(fx.dir, pt));
        g.dispose();
      } else if (fx.has("toy_mlp_init.safetensors")) {
        const toy = toyModelFromInit(fx);
        loadWeights(toy, join(fx.dir, pt), key ? { key } : {});
        toy.dispose();
      }
    } catch (e) {
      loadError = (e as Error).message;
    }
    rows.push(
      row(
        pt,
        "loads into a dtrain model (strict)",
        "errors",
        loadError ? 1 : 0,
        0,
        loadError || undefined,
      ),
    );
  }
  return rows;
}
