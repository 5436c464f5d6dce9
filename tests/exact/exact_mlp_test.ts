/**
 * Exact mode on a loop of one's own (tests/exact/scripts/mlp_loop.ts: the
 * toy MLP under DDP with AdamW, 50 steps): the digest of every weight and
 * optimizer-state tensor is the same as a single process and on 1, 2, 4 and
 * 8 ranks, on every rank; with exact mode off the same case parts between 1
 * and 2 ranks, so the comparison can fail.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { launched, type Line, single } from "./_runs.ts";

buildNative({ quiet: true });
const SCRIPT = "tests/exact/scripts/mlp_loop.ts";

function digests(lines: Line[], world: number): string[] {
  const mine = lines.filter((l) => l.case === "mlp");
  assert.equal(mine.length, world, JSON.stringify(lines));
  for (const l of mine) assert.equal(l.world, world);
  return mine.map((l) => l.digest);
}

Deno.test("exact mode: the toy MLP's weights and AdamW state have the same bits in one process and on 1, 2, 4 and 8 ranks", async () => {
  const ref = digests(await single(SCRIPT), 1)[0]!;
  assert.match(ref, /^[0-9a-f]{64}$/);
  for (const n of [1, 2, 4, 8]) {
    const r = await launched(SCRIPT, n);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    // DDP's exact option is the process's policy, which run.json records
    assert.equal(r.records["run.json"]?.attempts.at(-1).numerics?.exact, 8);
    for (const d of digests(r.lines, n)) assert.equal(d, ref, `${n} rank(s)`);
  }
});

Deno.test("exact mode off: the same MLP run parts between 1 and 2 ranks (the check can fail)", async () => {
  const one = digests(await single(SCRIPT, { EXACT: "0" }), 1)[0]!;
  const r = await launched(SCRIPT, 2, { env: { EXACT: "0" } });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.equal(r.records["run.json"]?.attempts.at(-1).numerics?.exact, false);
  const two = digests(r.lines, 2);
  assert.equal(two[0], two[1], "the ranks agree with each other");
  assert.notEqual(two[0], one, "without exact mode 2 ranks reassociate the gradient sums");
});

Deno.test("exact mode: a forward under noGrad in training mode (batch norm, dropout) is sharded too, so one process and 2 and 4 ranks keep the same bits", async () => {
  // An unsharded forward there would move the dropout stream by the rank's element count and
  // update the running statistics from the rank's rows: both depend on the world size.
  const ref = digests(await single(SCRIPT, { PEEK: "1" }), 1)[0]!;
  assert.notEqual(ref, digests(await single(SCRIPT), 1)[0], "PEEK changes the model");
  for (const n of [2, 4]) {
    const r = await launched(SCRIPT, n, { env: { PEEK: "1" } });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    for (const d of digests(r.lines, n)) assert.equal(d, ref, `${n} rank(s)`);
  }
});

Deno.test("exact mode: passes started by backward(loss, { onLeafGrad: ddp.gradReady }) keep the bits too; a step mixing them with ddp.backward is refused", async () => {
  // ddp.backward seeds a pass with 1/W on W > 1 ranks; a plain pass is not seeded and the tree's
  // root takes 1/W instead: the same bits in f32. Mixed in one step, the slots would hold sums
  // at two scales.
  const ref = digests(await single(SCRIPT), 1)[0]!;
  assert.equal(digests(await single(SCRIPT, { BACKWARD: "plain" }), 1)[0], ref);
  const plain = await launched(SCRIPT, 2, { env: { BACKWARD: "plain" } });
  assert.equal(plain.code, 0, plain.stdout + plain.stderr);
  for (const d of digests(plain.lines, 2)) assert.equal(d, ref, "plain backward, 2 ranks");
  const mixed = await launched(SCRIPT, 2, { env: { BACKWARD: "mixed" } });
  assert.notEqual(mixed.code, 0);
  assert.match(
    mixed.stderr,
    /exact mode: the backward passes of one step were started both by ddp\.backward\(loss\)/,
  );
});
