/** Tests of check/verdict.ts: the table layout and the closing line with its exit code. */
import assert from "node:assert/strict";
import { fail, formatTable, pass, skip, summary } from "../../check/verdict.ts";

Deno.test("formatTable() aligns the columns and puts each cause under its row", () => {
  const table = formatTable([
    pass("sampler", "epoch 0 coverage", "200/200 indices, 0 overlaps beyond 0 pad"),
    fail(
      "gradients",
      "world 2 vs single process",
      "loss max rel diff 5.0e-1",
      "the loss is summed",
    ),
  ]);
  const lines = table.split("\n");
  assert.equal(lines.length, 5);
  assert.match(
    lines[2]!,
    /^sampler {4}epoch 0 coverage {11}200\/200 indices, 0 overlaps beyond 0 pad {2}PASS$/,
  );
  assert.ok(lines[3]!.endsWith("FAIL"));
  assert.equal(lines[2]!.indexOf("PASS"), lines[3]!.indexOf("FAIL"), "verdicts in one column");
  assert.equal(lines[4]!.trim(), "-> the loss is summed");
});

Deno.test("summary() passes with skips, fails with the number of problems", () => {
  const ok = pass("state", "a", "x");
  assert.deepEqual(summary([ok]), { line: "dtrain check: PASS", code: 0 });
  assert.deepEqual(summary([ok, skip("state", "b", "y", "why")]), {
    line: "dtrain check: PASS (1 check skipped)",
    code: 0,
  });
  const bad = fail("sampler", "c", "z", "cause");
  assert.deepEqual(summary([bad, ok, bad]), { line: "dtrain check: FAIL (2 problems)", code: 1 });
  assert.deepEqual(summary([bad]), { line: "dtrain check: FAIL (1 problem)", code: 1 });
});
