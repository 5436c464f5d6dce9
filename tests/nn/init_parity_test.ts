import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { defaultFixtureDir, FixtureDir, toFloat32 } from "../../parity/fixtures.ts";
import { GPT } from "../../nn/gpt.ts";
import { Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { manualSeed } from "../../nn/init.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";
import type { Module } from "../../nn/module.ts";

buildNative({ quiet: true });
const fx = new FixtureDir(defaultFixtureDir());

function assertSameBits(model: Module, file: string): void {
  const ref = fx.tensors(file);
  let compared = 0;
  for (const [name, p] of model.namedParameters()) {
    const want = toFloat32(ref.get(name)!, name);
    const got = p.toArray() as Float32Array;
    assert.equal(got.length, want.length, name);
    for (let i = 0; i < got.length; i++) {
      if (!Object.is(got[i], want[i])) assert.fail(`${name}[${i}]: ${got[i]} != ${want[i]}`);
    }
    compared++;
  }
  assert.equal(compared, ref.size);
}

Deno.test("Sequential of Linear layers after manualSeed(1) has PyTorch's default init, bit for bit", () => {
  const meta = fx.json("toy_mlp.json");
  manualSeed(Number(meta.init_seed));
  const w0 = fx.tensors("toy_mlp_init.safetensors").get("0.weight")!;
  const w2 = fx.tensors("toy_mlp_init.safetensors").get("2.weight")!;
  const model = new Sequential(
    new Linear(w0.shape[1]!, w0.shape[0]!),
    new ReLU(),
    new Linear(w2.shape[1]!, w2.shape[0]!),
  );
  assertSameBits(model, "toy_mlp_init.safetensors");
  assert.deepEqual([...model.stateDict().keys()], ["0.weight", "0.bias", "2.weight", "2.bias"]);
  model.dispose();
});

Deno.test("GPT built from a seeded generator equals nanoGPT's init, bit for bit, with nanoGPT's names", () => {
  const meta = fx.json("gpt_mini.json");
  const c = meta.config;
  const model = new GPT(
    {
      vocabSize: c.vocab_size,
      blockSize: c.block_size,
      nLayer: c.n_layer,
      nHead: c.n_head,
      nEmbd: c.n_embd,
    },
    { generator: new TorchGenerator(Number(meta.build_seed)) },
  );
  assertSameBits(model, "gpt_mini_params.safetensors");
  assert.deepEqual(model.namedParameters().map(([n]) => n), meta.param_names);
  // state_dict has the tied lm_head.weight and the causal-mask buffers, as PyTorch's.
  const keys = [...model.stateDict().keys()];
  assert.ok(keys.includes("lm_head.weight") && keys.includes("transformer.h.0.attn.bias"));
  assert.equal(
    model.stateDict().get("lm_head.weight"),
    model.stateDict().get("transformer.wte.weight"),
  );
  model.dispose();
});
