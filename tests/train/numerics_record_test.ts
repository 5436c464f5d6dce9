/**
 * The numerics policy in the run records: a launched Trainer whose config
 * turns clipping off says so once in its log, config.json and run.json record
 * the policy, and `dtrain diff` against a run under the default policy names
 * the policy first.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { readRunDir } from "../../run_record/format.ts";
import { compareRuns } from "../../record_tools/compare.ts";
import { DEFAULT_NUMERICS } from "../../tensor/numerics_policy.ts";
import { TestRun } from "../launch/launch_helpers.ts";

const SCRIPT = fileURLToPath(new URL("./scripts/numerics_trainer.ts", import.meta.url));

Deno.test("a Trainer's numerics policy is said once, recorded in config.json and run.json, and compared by diff", async () => {
  const t = new TestRun();
  try {
    const launch = async (dir: string, nproc: number, policy: string) => {
      const r = await t.finish(
        t.launch(["--nproc", String(nproc), "--no-check", "--run-dir", dir, SCRIPT, policy]),
        180_000,
      );
      assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
      return r;
    };
    const off = join(t.dir, "off"), on = join(t.dir, "on");
    const r = await launch(off, 2, "no-clipping");
    const said = `${r.stdout}\n${r.stderr}`.split("\n")
      .filter((l) => /numerics policy \(set by the Trainer's config\): clipping is off/.test(l));
    // Three steps on each rank, one line per rank (every rank's stderr is shown).
    assert.deepEqual(said.map((l) => l.slice(0, 4)).sort(), ["[r0]", "[r1]"], said.join("\n"));
    await launch(on, 2, "default");

    const policy = { ...DEFAULT_NUMERICS, clipping: false };
    const a = readRunDir(off), b = readRunDir(on);
    assert.deepEqual(a.config!.numerics, policy);
    assert.deepEqual((a.config!.config as { numerics: unknown }).numerics, policy);
    assert.deepEqual(a.run.attempts[0]!.numerics, policy);
    assert.deepEqual(b.config!.numerics, { ...DEFAULT_NUMERICS });
    assert.deepEqual(b.run.attempts[0]!.numerics, { ...DEFAULT_NUMERICS });

    const c = compareRuns(a, b, { lossTol: 1e-6 });
    assert.equal(c.findings[0]!.topic, "numerics", JSON.stringify(c.findings));
    assert.equal(c.findings[0]!.headline, "numerics policy: clipping false vs true");
    assert.ok(!c.findings.some((f) => f.topic === "config"), "not reported twice");
  } finally {
    await t.cleanup();
  }
});
