/**
 * Tests of train/metrics.ts and train/tensorboard.ts: the run log writes
 * step and evaluation lines to metrics.jsonl and the same values as
 * TensorBoard events (decoded by Google's protobuf runtime in Python,
 * skipped with a reason when absent), the config as text, a session start
 * per attempt; a TensorBoard failure leaves metrics.jsonl intact.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { EvalRecordSchema, MetricsRecordSchema, parseJsonLines } from "../../run_record/format.ts";
import type { ConfigRecord, MetricsRecord } from "../../run_record/format.ts";
import { MetricsLogger } from "../../train/metrics.ts";
import { configText, STEP_TAGS, stepScalars } from "../../train/tensorboard.ts";
import { MAX_TEXT_BYTES } from "../../io/tfevents.ts";
import {
  eventFiles,
  f32Hex,
  type PyEvent,
  readerMissing,
  readEvents,
} from "../io/_tfevents_reader.ts";

if (readerMissing) {
  console.warn(
    `tests/train/metrics_test.ts: ${readerMissing}, so the event-file checks are skipped`,
  );
}

const CONFIG: ConfigRecord = {
  config: { optim: { name: "adamw", lr: 0.001 }, note: "<b>not markup</b>\n# not a heading" },
  seed: 7,
  worldSize: 2,
  device: "cpu",
};

function step(n: number, over: Partial<MetricsRecord> = {}): MetricsRecord {
  return {
    step: n,
    epoch: 0,
    attempt: 0,
    loss: 2 / n,
    lr: 1e-3,
    gradNorm: 0.5,
    lossScale: null,
    skipped: 0,
    samplesPerS: 1000,
    tokensPerS: null,
    stepMs: 12.5,
    dataWaitMs: 0.25,
    memBytes: 4096,
    stepMsByRank: [12.5, 11, 14],
    samples: 64,
    ...over,
  };
}

function withDir(f: (dir: string) => Promise<void> | void): Promise<void> {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-metrics-" });
  return Promise.resolve(f(dir)).finally(() => Deno.removeSync(dir, { recursive: true }));
}

const quiet = { logEvery: 1_000_000, enabled: true, totalSteps: null };

/** Silences console.log and console.warn of this test module while `f` runs; returns the warnings. */
async function capture(f: () => Promise<void> | void): Promise<string[]> {
  const { log, warn } = console;
  const warnings: string[] = [];
  console.log = () => {};
  console.warn = (...a: unknown[]) => warnings.push(a.join(" "));
  try {
    await f();
  } finally {
    Object.assign(console, { log, warn });
  }
  return warnings;
}

Deno.test("stepScalars() writes every numeric field under its tag, leaves nulls out and summarises the ranks", () => {
  const s = stepScalars(step(4, { gradNorm: null }));
  const tags = Object.fromEntries(s.map((v) => [v.tag, "scalar" in v ? v.scalar : NaN]));
  assert.deepEqual(tags, {
    "train/epoch": 0,
    "train/attempt": 0,
    "train/loss": 0.5,
    "train/lr": 1e-3,
    "train/skipped": 0,
    "perf/samplesPerS": 1000,
    "perf/stepMs": 12.5,
    "perf/dataWaitMs": 0.25,
    "perf/memBytes": 4096,
    "train/samples": 64,
    "perf/stepMsByRank/max": 14,
    "perf/stepMsByRank/median": 12.5,
    "perf/stepMsByRank/min": 11,
  });
  // Every field of the metrics line that can hold a number has a tag of its own.
  const numeric = Object.keys(MetricsRecordSchema.shape).filter((k) =>
    !["step", "stepMsByRank"].includes(k)
  );
  assert.deepEqual(numeric.filter((k) => !(k in STEP_TAGS)), []);
  // A field added later is not lost.
  const extra = stepScalars({ ...step(1), newCounter: 3 } as MetricsRecord);
  assert.ok(extra.some((v) => v.tag === "train/newCounter"));
});

Deno.test("configText() shows the config verbatim in a Markdown code block, cut to the text limit", () => {
  const t = configText(CONFIG);
  assert.match(t, /^The run's resolved config \(config\.json\):\n\n {4}\{\n/);
  for (const line of t.split("\n").slice(2)) assert.match(line, /^ {4}/);
  assert.ok(t.includes(JSON.stringify(CONFIG.config.note)));
  const huge = configText({ ...CONFIG, config: { blob: "é".repeat(MAX_TEXT_BYTES) } });
  assert.ok(new TextEncoder().encode(huge).length <= MAX_TEXT_BYTES);
  assert.match(huge, /… \(cut: the whole config is in config\.json\)$/);
});

Deno.test("MetricsLogger writes step and evaluation lines to metrics.jsonl, and config.json once", async () => {
  await withDir(async (dir) => {
    await capture(() => {
      const log = new MetricsLogger(dir, quiet);
      log.begin({ config: CONFIG, step: 0 });
      log.log(step(1));
      log.log(step(2, { loss: NaN }));
      log.logEval({
        step: 2,
        epoch: 0,
        attempt: 0,
        metrics: { accuracy: 0.75, "val loss": Infinity },
      });
      log.logEval({ step: 2, epoch: 0, attempt: 0, metrics: {} });
      log.close();
      const again = new MetricsLogger(dir, quiet);
      again.begin({ config: { ...CONFIG, seed: 8 }, step: 2 });
      again.close();
    });
    const text = Deno.readTextFileSync(join(dir, "metrics.jsonl"));
    const lines = text.trim().split("\n").map((l) => JSON.parse(l));
    assert.equal(lines.length, 3, "an evaluation without metrics records nothing");
    assert.equal(lines[1].loss, "NaN");
    assert.deepEqual(lines[2], {
      kind: "eval",
      step: 2,
      epoch: 0,
      attempt: 0,
      metrics: { accuracy: 0.75, "val loss": "Infinity" },
    });
    assert.deepEqual(parseJsonLines(EvalRecordSchema, JSON.stringify(lines[2]), "x").records[0], {
      kind: "eval",
      step: 2,
      epoch: 0,
      attempt: 0,
      metrics: { accuracy: 0.75, "val loss": Infinity },
    });
    assert.equal(
      JSON.parse(Deno.readTextFileSync(join(dir, "config.json"))).seed,
      7,
      "the first config is kept",
    );
  });
});

Deno.test("MetricsLogger refuses evaluation metric names a reader could not show, naming the field", async () => {
  await withDir(async (dir) => {
    const log = new MetricsLogger(dir, quiet);
    const bad = (name: string) => () =>
      log.logEval({ step: 1, epoch: 0, attempt: 0, metrics: { [name]: 1 } });
    await capture(() => {
      assert.throws(
        bad(""),
        /Cannot write this metrics\.jsonl line: metrics: evaluation metric name "" must be 1 to 200 characters, got 0/,
      );
      assert.throws(bad("a\nb"), /metric name "a\\nb" must be printable text/);
      assert.throws(bad("x".repeat(201)), /must be 1 to 200 characters, got 201/);
    });
    log.close();
  });
});

Deno.test("MetricsLogger does nothing on other ranks, and no TensorBoard files when asked not to", async () => {
  await withDir(async (dir) => {
    const other = new MetricsLogger(dir, { ...quiet, enabled: false });
    other.begin({ config: CONFIG, step: 0 });
    other.log(step(1));
    other.logEval({ step: 1, epoch: 0, attempt: 0, metrics: { a: 1 } });
    other.close();
    assert.deepEqual([...Deno.readDirSync(dir)], []);
    await capture(() => {
      const off = new MetricsLogger(dir, { ...quiet, tensorboard: false });
      off.begin({ config: CONFIG, step: 0 });
      off.log(step(1));
      off.close();
    });
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name).sort(), [
      "config.json",
      "metrics.jsonl",
    ]);
  });
});

Deno.test("a TensorBoard failure is reported once and training's metrics.jsonl goes on", async () => {
  await withDir(async (dir) => {
    Deno.writeTextFileSync(join(dir, "tb"), "a file where the tb folder should be");
    let log!: MetricsLogger;
    const warnings = await capture(() => {
      log = new MetricsLogger(dir, quiet);
      log.begin({ config: CONFIG, step: 0 });
      for (let i = 1; i <= 3; i++) log.log(step(i));
      log.close();
    });
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(
      warnings[0]!,
      /TensorBoard event files in .*\/tb are off from here on: .*metrics\.jsonl still records every step/,
    );
    assert.equal(log.tensorboardFile, null);
    const m = parseJsonLines(
      MetricsRecordSchema,
      Deno.readTextFileSync(join(dir, "metrics.jsonl")),
      "m",
    );
    assert.equal(m.records.length, 3);
  });
});

Deno.test({
  name:
    "MetricsLogger's TensorBoard events decode with Google's protobuf runtime: scalars, evaluations, config text, session starts",
  ignore: readerMissing !== null,
  async fn() {
    await withDir(async (dir) => {
      const files: string[] = [];
      await capture(() => {
        const log = new MetricsLogger(dir, quiet);
        log.begin({ config: CONFIG, step: 0 });
        for (let i = 1; i <= 5; i++) log.log(step(i));
        log.logEval({
          step: 5,
          epoch: 0,
          attempt: 0,
          metrics: { accuracy: 0.8, "test loss": 0.4 },
        });
        files.push(log.tensorboardFile!);
        log.close();
        // A second attempt resumed after step 3.
        const again = new MetricsLogger(dir, quiet);
        again.begin({ config: CONFIG, step: 3 });
        again.log(step(4, { attempt: 1, loss: 9 }));
        files.push(again.tensorboardFile!);
        again.close();
      });
      assert.deepEqual(eventFiles(join(dir, "tb")), files, "the second attempt's file sorts last");
      const decoded = await readEvents(files);
      const [first, second] = files.map((f) => decoded[f]!) as [PyEvent[], PyEvent[]];
      assert.deepEqual(first.map((e) => `${e.what}@${e.step}`), [
        "file_version@0",
        "session_log@1",
        "summary@0",
        "summary@1",
        "summary@2",
        "summary@3",
        "summary@4",
        "summary@5",
        "summary@5",
      ]);
      const config = first[2]!.values![0]!;
      assert.equal(config.tag, "config");
      assert.equal(config.plugin, "text");
      assert.deepEqual(config.strings, [configText(CONFIG)]);
      const s3 = first[5]!.values!;
      const scalar = (vs: typeof s3, tag: string) => vs.find((v) => v.tag === tag)?.f32;
      assert.equal(scalar(s3, "train/loss"), f32Hex(2 / 3));
      assert.equal(scalar(s3, "train/lr"), f32Hex(1e-3));
      assert.equal(scalar(s3, "perf/stepMsByRank/max"), f32Hex(14));
      assert.equal(scalar(s3, "train/gradNorm"), f32Hex(0.5));
      assert.equal(s3.length, stepScalars(step(3)).length);
      assert.deepEqual(first[8]!.values, [
        { tag: "eval/accuracy", kind: "simple_value", f32: f32Hex(0.8) },
        { tag: "eval/test loss", kind: "simple_value", f32: f32Hex(0.4) },
      ]);
      // The resumed attempt: a session start at step 4 (TensorBoard drops steps >= 4 of the first file).
      assert.deepEqual(second.map((e) => `${e.what}@${e.step}`), [
        "file_version@0",
        "session_log@4",
        "summary@3",
        "summary@4",
      ]);
      assert.equal(second[1]!.status, 1);
      assert.equal(scalar(second[3]!.values!, "train/loss"), f32Hex(9));
    });
  },
});

Deno.test("docs/RUN_DIR.md names the TensorBoard tag of every field of the step line", () => {
  const doc = Deno.readTextFileSync(new URL("../../docs/RUN_DIR.md", import.meta.url));
  for (const [field, tag] of Object.entries(STEP_TAGS)) {
    assert.ok(doc.includes(`\`${field}\``), `docs/RUN_DIR.md mentions field ${field}`);
    assert.ok(doc.includes(`\`${tag}\``), `docs/RUN_DIR.md mentions tag ${tag}`);
  }
});
