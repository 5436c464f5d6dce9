import assert from "node:assert/strict";
import { microBatchSize, resolveConfig } from "../../train/config.ts";

Deno.test("resolveConfig() fills every default", () => {
  const c = resolveConfig({ optim: { lr: 0.1 } });
  assert.equal(c.optim.lr, 0.1);
  assert.equal(c.optim.name, "adamw");
  assert.equal(resolveConfig({ optim: { name: "rmsprop" } }).optim.alpha, 0.99); // torch's default
  assert.equal(c.data.globalBatchSize, 64);
  assert.equal(c.checkpoint.keepLast, 3);
  assert.equal(c.precision.autocast, "f32");
});

Deno.test("resolveConfig() names each bad field, its value and what is allowed", () => {
  assert.throws(
    () => resolveConfig({ epochs: 1.5, optim: { lr: -1, name: "lamb" }, bogus: true }),
    (e: Error) => {
      assert.match(e.message, /epochs = 1\.5: .*expected int/);
      assert.match(
        e.message,
        /optim\.name = "lamb": .*"adamw"\|"sgd"\|"adam"\|"adadelta"\|"adagrad"\|"rmsprop"/,
      );
      assert.match(e.message, /optim\.lr = -1: .*>0/);
      assert.match(
        e.message,
        /bogus is not a field; the fields of the config are epochs, maxSteps, /,
      );
      return true;
    },
  );
});

Deno.test("microBatchSize() splits the global batch over ranks and accumulation, or says why not", () => {
  const c = resolveConfig({ data: { globalBatchSize: 64, gradAccumulation: 2 } });
  assert.equal(microBatchSize(c, 4), 8);
  assert.throws(
    () => microBatchSize(c, 3),
    /globalBatchSize 64 is not divisible by world size 3 × gradAccumulation 2/,
  );
});
