import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { defaultFixtureDir } from "../../parity/fixtures.ts";
import { Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { loadWeights } from "../../nn/load.ts";
import { StateDictError } from "../../nn/module.ts";
import { readSafetensorsFile } from "../../io/safetensors.ts";

buildNative({ quiet: true });
const FX = defaultFixtureDir();
const toy = () => new Sequential(new Linear(128, 256), new ReLU(), new Linear(256, 2));

Deno.test("loadWeights() reads a DDP-prefixed torch.save file into a plain model", () => {
  const m = toy();
  loadWeights(m, join(FX, "ckpt_ddp_state_dict.pt"));
  const ref = readSafetensorsFile(join(FX, "ckpt_ddp_state_dict.safetensors")).tensors.get(
    "module.0.weight",
  )!;
  assert.deepEqual(m.stateDict().get("0.weight")!.toBytes(), ref.data);
  m.dispose();
});

Deno.test("loadStateDict() lists every missing, unexpected and wrongly shaped tensor", () => {
  const m = new Sequential(
    new Linear(128, 256),
    new ReLU(),
    new Linear(256, 3),
    new ReLU(),
    new Linear(3, 1),
  );
  try {
    loadWeights(m, join(FX, "ckpt_state_dict.pt"));
    assert.fail("loading a mismatched state dict must throw");
  } catch (e) {
    assert.ok(e instanceof StateDictError, String(e));
    const se = e as StateDictError;
    assert.deepEqual(se.missing, ["4.weight", "4.bias"]);
    assert.deepEqual(se.unexpected, []);
    assert.deepEqual(se.mismatched.map((x) => x.name), ["2.weight", "2.bias"]);
    assert.match(
      se.message,
      /missing keys: 4\.weight, 4\.bias; 2\.weight: expected shape \[3,256\], got \[2,256\]; 2\.bias: expected shape \[3\], got \[2\]/,
    );
  }
  m.dispose();
});
