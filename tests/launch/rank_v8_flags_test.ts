/**
 * The V8 flags of rank processes: the launcher's own (a 1 MB young generation; V8's compiles and
 * GC on the rank's thread where the ranks have a core each or less) merged with the
 * user's DENO_V8_FLAGS, where a flag the user sets keeps the user's value and the user's other
 * flags still apply; checked in the merge and in launched ranks.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  CROWDED_V8_FLAGS,
  RANK_V8_FLAGS,
  rankV8Args,
  rankV8Flags,
} from "../../launch/rank_v8_flags.ts";
import { SCRIPTS, TestRun } from "./launch_helpers.ts";

Deno.test("rankV8Args() gives the rank's flags, less those the user's DENO_V8_FLAGS sets", () => {
  assert.deepEqual(RANK_V8_FLAGS, ["--max-semi-space-size=1"]);
  assert.deepEqual(rankV8Args(undefined), ["--v8-flags=--max-semi-space-size=1"]);
  assert.deepEqual(rankV8Args(""), ["--v8-flags=--max-semi-space-size=1"]);
  // the user's other flags come from the environment Deno reads itself: ours still go on
  assert.deepEqual(rankV8Args("--stack-size=100,--trace-gc"), [
    "--v8-flags=--max-semi-space-size=1",
  ]);
  // the user's value of the same flag, in any of V8's spellings, wins
  for (
    const theirs of [
      "--max-semi-space-size=8",
      "--max_semi_space_size=8",
      "x,--max-semi-space-size",
    ]
  ) {
    assert.deepEqual(rankV8Args(theirs), [], theirs);
  }
  assert.deepEqual(rankV8Args("--max-semi-space-size-x=8"), ["--v8-flags=--max-semi-space-size=1"]);
});

Deno.test("rankV8Flags() keeps V8's compiles and GC on the rank's thread where a node has a core per rank or less", () => {
  assert.deepEqual(CROWDED_V8_FLAGS, ["--no-concurrent-recompilation", "--single-threaded-gc"]);
  const crowded = ["--max-semi-space-size=1", ...CROWDED_V8_FLAGS];
  assert.deepEqual(rankV8Flags(2, 2), crowded);
  assert.deepEqual(rankV8Flags(2, 3), crowded);
  assert.deepEqual(rankV8Flags(1, 1), crowded);
  assert.deepEqual(rankV8Flags(3, 2), RANK_V8_FLAGS);
  assert.deepEqual(rankV8Flags(96, 8), RANK_V8_FLAGS);
  assert.deepEqual(rankV8Args(undefined, crowded), [
    "--v8-flags=--max-semi-space-size=1,--no-concurrent-recompilation,--single-threaded-gc",
  ]);
  // the user's value wins here too, whichever way the user spells it
  assert.deepEqual(rankV8Args("--concurrent-recompilation", crowded), [
    "--v8-flags=--max-semi-space-size=1,--single-threaded-gc",
  ]);
  assert.deepEqual(rankV8Args("--no-single-threaded-gc,--concurrent_recompilation", crowded), [
    "--v8-flags=--max-semi-space-size=1",
  ]);
});

/** Each rank's V8 line, by rank. */
async function ranksV8(env: Record<string, string>) {
  const t = new TestRun();
  try {
    const r = await t.finish(
      t.launch(["--nproc", "2", "--log-ranks", "all", join(SCRIPTS, "v8_flags.ts")], { env }),
    );
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.split("\n").filter((l) => /^\[r\d\] V8 /.test(l));
    assert.equal(lines.length, 2, r.stdout);
    return lines.map((l) =>
      JSON.parse(l.replace(/^\[r\d\] V8 /, "")) as {
        cmdline: string[];
        depth: number;
        newSpace: number;
      }
    );
  } finally {
    await t.cleanup();
  }
}

Deno.test("launched ranks run with the launcher's V8 flags and the user's, the user's value winning", async () => {
  // The user's --stack-size (a few thousand frames instead of 13000 or more) and our young generation.
  // Two ranks: V8's compiles and GC on the rank's thread too where the machine has 2 cores or fewer.
  const ours = `--v8-flags=${rankV8Flags(navigator.hardwareConcurrency || 1, 2).join(",")}`;
  for (const v of await ranksV8({ DENO_V8_FLAGS: "--stack-size=200" })) {
    assert.ok(v.cmdline.includes(ours), `${ours} missing from ${v.cmdline.join(" ")}`);
    assert.ok(v.depth < 9000, `the user's --stack-size applies: ${v.depth} frames`);
    assert.ok(v.newSpace <= 2 << 20, `a young generation of ${v.newSpace} bytes`);
  }
  // The user's own young-generation size: nothing of ours on the command line to override it.
  for (
    const v of await ranksV8({
      DENO_V8_FLAGS: "--max-semi-space-size=16,--concurrent-recompilation,--no-single-threaded-gc",
    })
  ) {
    assert.ok(!v.cmdline.some((a) => a.startsWith("--v8-flags")), v.cmdline.join(" "));
    assert.ok(v.depth > 9000, `${v.depth} frames`);
  }
});
