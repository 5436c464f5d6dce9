/**
 * rand, randn and randint after manualSeed against torch.manual_seed and the
 * same calls in the same order (fixtures/torch_api/random.json, three seeds):
 * equal bits (rand and randint are integer arithmetic on MT19937 outputs;
 * randn of 16 or more elements is torch's float Box-Muller, bit-exact), but
 * randn below 16 elements takes torch's double path through libm's log /
 * sin / cos, which may differ in the last bit of a double and so, rarely,
 * in the last bit of the float: that case alone allows one float ulp.
 */
import assert from "node:assert/strict";
import { scope } from "../../tensor/tensor.ts";
import { manualSeed } from "../../nn/init.ts";
import { rand, randint, randintLike, randn, randnLike } from "../../nn/random.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";
import { assertClose, readPiecesFixture } from "./_fixtures.ts";

interface Draw {
  op: "rand" | "randn" | "randint";
  shape: number[];
  low?: number;
  high?: number;
  values: number[];
}
const FIX = readPiecesFixture<{ cases: { seed: number; draws: Draw[] }[] }>("random.json");

for (const c of FIX.cases) {
  Deno.test(`seed ${c.seed}: rand, randn and randint equal torch's draws in order`, () => {
    scope(() => {
      manualSeed(c.seed);
      for (const [i, d] of c.draws.entries()) {
        const t = d.op === "rand"
          ? rand(d.shape)
          : d.op === "randn"
          ? randn(d.shape)
          : randint(d.low!, d.high!, d.shape);
        assert.deepEqual(t.shape, d.shape);
        const got = Array.from(t.toArray() as ArrayLike<number | bigint>, Number);
        if (d.op === "randint") assert.equal(t.dtype, "i64");
        const n = got.length;
        const tol = d.op === "randn" && n < 16 ? 2 ** -23 : 0;
        assertClose(`draw ${i} (${d.op} [${d.shape}])`, got, d.values, tol, 0);
      }
    });
  });
}

Deno.test("an explicit generator leaves the default one alone; *_like and bad arguments", () => {
  scope(() => {
    manualSeed(7);
    const a = randn([20]).toArray();
    manualSeed(7);
    const g = new TorchGenerator(99);
    randn([20], { generator: g });
    assert.deepEqual(randnLike(randn([0])).shape, [0]);
    assert.deepEqual(randn([20]).toArray(), a);
    assert.equal(randintLike(randn([0]), 0, 3, { dtype: "i32" }).dtype, "i32");
    assert.throws(() => randint(3, 3, [2]), /low < high/);
    assert.throws(() => rand([2, -1]), /non-negative integers/);
    assert.throws(() => randint(0, 2 ** 40, [1], { dtype: "i32" }), /does not fit in i32/);
  });
});
