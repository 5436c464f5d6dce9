/**
 * autocast over an async function holds for all of it, across its awaits,
 * and not for code that runs meanwhile outside it (as noGrad).
 */
import assert from "node:assert/strict";
import { autocast, autocastDtype } from "../../amp/autocast.ts";

const tick = () => new Promise<void>((r) => setTimeout(r, 1));

Deno.test("await autocast(dtype, async fn) keeps the dtype after every await, only inside fn", async () => {
  const inside: (string | null)[] = [], outside: (string | null)[] = [];
  const evaluation = autocast("bf16", async () => {
    for (let i = 0; i < 3; i++) {
      await tick();
      inside.push(autocastDtype());
    }
    return autocast("f32", () => autocastDtype());
  });
  const other = (async () => {
    for (let i = 0; i < 3; i++) {
      await tick();
      outside.push(autocastDtype());
    }
  })();
  const [nested] = await Promise.all([evaluation, other]);
  assert.deepEqual(inside, ["bf16", "bf16", "bf16"]);
  assert.deepEqual(outside, [null, null, null]);
  assert.equal(nested, null, "autocast f32 inside turns it off there");
  assert.equal(autocastDtype(), null);
  assert.throws(() =>
    autocast("f16", () => {
      throw new Error("x");
    }), /x/);
  assert.equal(autocastDtype(), null);
});
