/**
 * Parameter and data initialisation against PyTorch's files, bit for bit:
 * Linear's default init (toy_mlp_init), torch.randn / randint (toy_mlp_data,
 * gpt_mini_io) and nanoGPT's N(0, 0.02) init with its draw order (gpt_mini_params).
 */
import assert from "node:assert/strict";
import { TorchGenerator } from "../../random/torch_generator.ts";
import {
  kaimingUniformLinear,
  kaimingUniformLinearBound,
  linearBiasBound,
} from "../../random/init.ts";
import { bitDiff, f32Tensor, readJsonFixture, readSafetensorsFixture } from "./_fixtures.ts";

function assertBitIdentical(
  actual: Float32Array,
  expected: Float32Array,
  what: string,
): void {
  const diff = bitDiff(actual, expected);
  assert.equal(
    diff.mismatches,
    0,
    `${what}: ${diff.mismatches} of ${expected.length} elements differ (max abs ${diff.maxAbs}); first: ${
      diff.first.join(", ")
    }`,
  );
}

function shapeOf(
  tensors: ReturnType<typeof readSafetensorsFixture>,
  key: string,
): number[] {
  const t = tensors.get(key);
  if (!t) throw new Error(`fixture tensor ${key} is missing`);
  return t.shape;
}

const toy = readJsonFixture<
  { init_seed: number; data_seed: number; samples: number }
>(
  "toy_mlp.json",
);

Deno.test("kaimingUniformLinear() reproduces toy_mlp_init bit for bit", () => {
  const init = readSafetensorsFixture("toy_mlp_init.safetensors");
  const gen = new TorchGenerator(toy.init_seed);
  // nn.Sequential(Linear, ReLU, Linear) draws 0.weight, 0.bias, 2.weight, 2.bias in order.
  for (const layer of ["0", "2"]) {
    const [outFeatures, inFeatures] = shapeOf(init, `${layer}.weight`);
    const { weight, bias } = kaimingUniformLinear(
      gen,
      outFeatures!,
      inFeatures!,
    );
    assertBitIdentical(
      weight,
      f32Tensor(init, `${layer}.weight`),
      `${layer}.weight`,
    );
    assertBitIdentical(
      bias!,
      f32Tensor(init, `${layer}.bias`),
      `${layer}.bias`,
    );
  }
});

Deno.test("kaimingUniformLinear() stays inside its bounds and skips the bias when asked", () => {
  assert.ok(
    Math.abs(kaimingUniformLinearBound(128) - 1 / Math.sqrt(128)) < 1e-15,
  );
  assert.equal(linearBiasBound(256), 0.0625);
  const gen = new TorchGenerator(4);
  const { weight, bias } = kaimingUniformLinear(gen, 8, 16, { bias: false });
  assert.equal(bias, null);
  assert.equal(weight.length, 128);
  for (const w of weight) {
    assert.ok(Math.abs(w) <= kaimingUniformLinearBound(16));
  }
  // Without a bias only the weight's 128 draws are consumed.
  const skipped = new TorchGenerator(4);
  skipped.randFloat32(128);
  assert.equal(gen.nextUint32(), skipped.nextUint32());
  assert.throws(
    () => kaimingUniformLinear(gen, 0, 4),
    /outFeatures is 0, expected a positive integer/,
  );
});

Deno.test("normal_() and randint() reproduce torch.randn / torch.randint of toy_mlp_data bit for bit", () => {
  const data = readSafetensorsFixture("toy_mlp_data.safetensors");
  const gen = new TorchGenerator(toy.data_seed);
  const expectedX = f32Tensor(data, "X");
  assert.equal(shapeOf(data, "X")[0], toy.samples);
  assertBitIdentical(
    gen.normal_(new Float32Array(expectedX.length), 0, 1),
    expectedX,
    "X",
  );
  const expectedY = data.get("y")!.data as BigInt64Array;
  const y = Array.from(
    { length: toy.samples },
    () => BigInt(gen.randint(0, 2)),
  );
  assert.deepEqual(y, Array.from(expectedY));
});

interface GptMiniFixture {
  config: {
    vocab_size: number;
    block_size: number;
    n_layer: number;
    n_embd: number;
  };
  build_seed: number;
  data_seed: number;
  B: number;
  T: number;
}

Deno.test("normal_() reproduces gpt_mini's nanoGPT init bit for bit, following torch's draw order", () => {
  const cfg = readJsonFixture<GptMiniFixture>("gpt_mini.json");
  const { vocab_size: V, block_size: P, n_layer: L, n_embd: C } = cfg.config;
  const gen = new TorchGenerator(cfg.build_seed);
  // 1. Construction consumes the generator through the default inits:
  //    Embedding = normal_(0, 1), Linear = kaiming-uniform weight + uniform bias.
  gen.normal_(new Float32Array(V * C), 0, 1); // wte
  gen.normal_(new Float32Array(P * C), 0, 1); // wpe
  for (let l = 0; l < L; l++) {
    kaimingUniformLinear(gen, 3 * C, C); // attn.c_attn
    kaimingUniformLinear(gen, C, C); // attn.c_proj
    kaimingUniformLinear(gen, 4 * C, C); // mlp.c_fc
    kaimingUniformLinear(gen, C, 4 * C); // mlp.c_proj
  }
  kaimingUniformLinear(gen, V, C, { bias: false }); // lm_head
  // 2. apply(_init_weights), children before parents: N(0, 0.02) for every
  //    Linear / Embedding weight; the tied wte is drawn again as lm_head, last.
  const params = new Map<string, Float32Array>();
  const draw = (name: string, numel: number, std: number) =>
    params.set(name, gen.normal_(new Float32Array(numel), 0, std));
  draw("transformer.wte.weight", V * C, 0.02);
  draw("transformer.wpe.weight", P * C, 0.02);
  const block = (l: number) => `transformer.h.${l}.`;
  for (let l = 0; l < L; l++) {
    draw(block(l) + "attn.c_attn.weight", 3 * C * C, 0.02);
    draw(block(l) + "attn.c_proj.weight", C * C, 0.02);
    draw(block(l) + "mlp.c_fc.weight", 4 * C * C, 0.02);
    draw(block(l) + "mlp.c_proj.weight", 4 * C * C, 0.02);
  }
  draw("transformer.wte.weight", V * C, 0.02); // lm_head.weight is wte.weight
  // 3. Every c_proj.weight is redrawn from N(0, 0.02 / sqrt(2 * n_layer)).
  for (let l = 0; l < L; l++) {
    draw(block(l) + "attn.c_proj.weight", C * C, 0.02 / Math.sqrt(2 * L));
    draw(block(l) + "mlp.c_proj.weight", 4 * C * C, 0.02 / Math.sqrt(2 * L));
  }
  const expected = readSafetensorsFixture("gpt_mini_params.safetensors");
  assert.equal(params.size, 2 + 4 * L);
  for (const [name, values] of params) {
    assertBitIdentical(values, f32Tensor(expected, name), name);
  }
});

Deno.test("randint() reproduces gpt_mini's token batch (torch.randint(0, 256, (B, T + 1)))", () => {
  const cfg = readJsonFixture<GptMiniFixture>("gpt_mini.json");
  const io = readSafetensorsFixture("gpt_mini_io.safetensors");
  const gen = new TorchGenerator(cfg.data_seed);
  const width = cfg.T + 1;
  const tokens = Array.from(
    { length: cfg.B * width },
    () => gen.randint(0, cfg.config.vocab_size),
  );
  const x = io.get("x")!.data as BigInt64Array;
  const y = io.get("y")!.data as BigInt64Array;
  for (let b = 0; b < cfg.B; b++) {
    for (let t = 0; t < cfg.T; t++) {
      assert.equal(
        BigInt(tokens[b * width + t]!),
        x[b * cfg.T + t],
        `x[${b}][${t}]`,
      );
      assert.equal(
        BigInt(tokens[b * width + t + 1]!),
        y[b * cfg.T + t],
        `y[${b}][${t}]`,
      );
    }
  }
});
