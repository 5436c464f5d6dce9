/**
 * The Trainer's TensorBoard events end to end: a 2-rank run under the
 * launcher that crashes and resumes from a checkpoint leaves one event file
 * per attempt (rank 0 only), and what TensorBoard shows after honouring the
 * session starts is exactly metrics.jsonl's final trajectory and evaluations.
 * The files are decoded by Google's protobuf runtime in Python (skipped with
 * a reason when absent).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { finalEvals, finalSteps, readRunDir } from "../../run_record/format.ts";
import { configText, evalTag } from "../../train/tensorboard.ts";
import { eventFiles, f32Hex, readerMissing, readEvents } from "../io/_tfevents_reader.ts";

if (readerMissing) {
  console.warn(`tests/train/tensorboard_test.ts: ${readerMissing}, so it is skipped`);
}

/**
 * The scalar series TensorBoard shows: files in name order, and a session
 * start at step s drops every earlier point at steps >= s (its purge of
 * orphaned data after a restart).
 */
function shownScalars(
  files: Record<string, Awaited<ReturnType<typeof readEvents>>[string]>,
): Map<string, Map<number, string>> {
  const series = new Map<string, Map<number, string>>();
  for (const path of Object.keys(files).sort()) {
    for (const e of files[path]!) {
      const step = Number(e.step);
      if (e.what === "session_log" && e.status === 1) {
        for (const points of series.values()) {
          for (const s of [...points.keys()]) if (s >= step) points.delete(s);
        }
      }
      for (const v of e.values ?? []) {
        if (v.kind !== "simple_value") continue;
        if (!series.has(v.tag)) series.set(v.tag, new Map());
        series.get(v.tag)!.set(step, v.f32!);
      }
    }
  }
  return series;
}

Deno.test({
  name:
    "Trainer: a crashed and resumed 2-rank run's TensorBoard events show metrics.jsonl's final trajectory",
  ignore: readerMissing !== null,
  async fn() {
    buildNative({ quiet: true });
    const t = new TestRun();
    try {
      const dir = join(t.dir, "run");
      const l = t.launch([
        "--nproc",
        "2",
        "--run-dir",
        dir,
        "--max-restarts",
        "1",
        join(REPO, "tests/train/scripts/toy_fixture_train.ts"),
      ], { env: { CRASH_AT_STEP: "20", CKPT_EVERY: "12", EVAL: "1" } });
      const r = await t.finish(l, 120_000);
      assert.equal(r.code, 0, `launcher failed:\n${r.stdout}\n${r.stderr}`);
      assert.match(r.stdout, /epoch 0: loss on 256 samples \d\.\d{4}/);

      const files = eventFiles(join(dir, "tb"));
      assert.equal(files.length, 2, `one event file per attempt, rank 0 only: ${files}`);
      const decoded = await readEvents(files);
      const run = readRunDir(dir);
      const steps = finalSteps(run.metrics);
      assert.equal(steps.length, 32);
      assert.deepEqual(
        new Set(run.metrics.map((m) => m.attempt)),
        new Set([0, 1]),
        "both attempts logged steps",
      );

      const shown = shownScalars(decoded);
      const expect = (pick: (m: (typeof steps)[number]) => number | null) =>
        new Map(steps.flatMap((m) => pick(m) === null ? [] : [[m.step, f32Hex(pick(m)!)]]));
      assert.deepEqual(shown.get("train/loss"), expect((m) => m.loss));
      assert.deepEqual(shown.get("train/lr"), expect((m) => m.lr));
      assert.deepEqual(shown.get("train/gradNorm"), expect((m) => m.gradNorm));
      assert.deepEqual(shown.get("train/attempt"), expect((m) => m.attempt));
      assert.deepEqual(shown.get("train/samples"), expect(() => 64));
      assert.deepEqual(shown.get("perf/stepMs"), expect((m) => m.stepMs));

      const evals = finalEvals(run.evals);
      assert.deepEqual([...evals.keys()], ["loss on 256 samples"]);
      // The epoch-end checkpoint at step 16 follows its evaluation, so the second attempt resumes after both.
      assert.deepEqual(run.evals.map((e) => [e.step, e.attempt]), [[16, 0], [32, 1]]);
      assert.deepEqual(
        shown.get(evalTag("loss on 256 samples")),
        new Map(evals.get("loss on 256 samples")!.map(([s, v]) => [s, f32Hex(v)])),
      );

      const config = JSON.parse(Deno.readTextFileSync(join(dir, "config.json")));
      for (const path of files) {
        const text = decoded[path]!.flatMap((e) => e.values ?? []).find((v) => v.tag === "config");
        assert.deepEqual(text?.strings, [configText(config)], `${path}: the config text`);
      }
      const starts = files.map((p) => decoded[p]!.filter((e) => e.what === "session_log"));
      assert.deepEqual(starts.map((s) => s.map((e) => e.step)), [["1"], ["17"]]);
      // Steps 17 to 20 of the first attempt are superseded.
      assert.deepEqual(
        run.metrics.filter((m) => m.attempt === 0).map((m) => m.step).slice(-4),
        [17, 18, 19, 20],
      );
    } finally {
      await t.cleanup();
    }
  },
});
