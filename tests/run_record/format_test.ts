/**
 * Tests of run_record/format.ts: round trips through the writers and readRunDir(),
 * non-finite losses, errors that name the file, line and field for
 * malformed content (including seeded fuzzing of metrics.jsonl), missing
 * optional files, and the final trajectory of a resumed run.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  dataOrderLine,
  describeIssues,
  evalLine,
  finalEvals,
  finalSteps,
  metricsLine,
  type MetricsRecord,
  MetricsRecordSchema,
  parseJsonLines,
  readRunDir,
  RunRecordSchema,
} from "../../run_record/format.ts";
import {
  baseSpec,
  configOf,
  dataOrderOf,
  evalsOf,
  metricsOf,
  runRecordOf,
  withTempDir,
  writeRun,
} from "./_fixtures.ts";

/** Expects `fn` to throw a TypeError whose message matches `re`. */
function throwsType(fn: () => unknown, re: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof TypeError, `expected a TypeError, got ${e}`);
    assert.match(e.message, re);
    return true;
  });
}

Deno.test("readRunDir() reads back exactly what the writers wrote", async () => {
  await withTempDir((root) => {
    const spec = baseSpec();
    const dir = writeRun(root, "a", spec);
    const r = readRunDir(dir);
    assert.deepEqual(r.run, runRecordOf(spec, dir));
    assert.deepEqual(r.config, configOf(spec));
    assert.deepEqual(r.metrics, metricsOf(spec));
    assert.deepEqual(r.dataOrder, dataOrderOf(spec));
    assert.deepEqual(r.missing, []);
    assert.deepEqual(r.warnings, []);
  });
});

Deno.test("readRunDir() tells evaluation lines of metrics.jsonl from step lines", async () => {
  await withTempDir((root) => {
    const spec = baseSpec();
    spec.evalEvery = 4;
    const dir = writeRun(root, "a", spec);
    const r = readRunDir(dir);
    assert.deepEqual(r.metrics, metricsOf(spec));
    assert.deepEqual(r.evals, evalsOf(spec));
    assert.deepEqual(r.evals.map((e) => e.step), [3, 7, 11]);
    const path = join(dir, "metrics.jsonl");
    const text = Deno.readTextFileSync(path);
    Deno.writeTextFileSync(path, text.replace(`"kind":"eval"`, `"kind":"test"`));
    throwsType(
      () => readRunDir(dir),
      new RegExp(`^${path}:5: kind: Invalid input: expected "eval"`),
    );
    Deno.writeTextFileSync(path, text.replace(/"metrics":\{[^}]*\}/, `"metrics":{}`));
    throwsType(() => readRunDir(dir), /:5: metrics: an evaluation needs at least one metric/);
  });
});

Deno.test("evalLine() writes non-finite values as strings and refuses names a reader could not show", () => {
  const e = {
    kind: "eval" as const,
    step: 3,
    epoch: 0,
    attempt: 0,
    metrics: { acc: NaN, ppl: Infinity },
  };
  assert.equal(
    evalLine(e),
    `{"kind":"eval","step":3,"epoch":0,"attempt":0,"metrics":{"acc":"NaN","ppl":"Infinity"}}\n`,
  );
  throwsType(
    () => evalLine({ ...e, metrics: { "a\tb": 1 } }),
    /metrics: evaluation metric name "a\\tb" must be printable text/,
  );
  throwsType(() => evalLine({ ...e, metrics: { "\ud800": 1 } }), /must be printable text/);
});

Deno.test("finalEvals() keeps, per metric and step, the latest attempt's value", () => {
  const ev = (step: number, attempt: number, metrics: Record<string, number>) => ({
    kind: "eval" as const,
    step,
    epoch: 0,
    attempt,
    metrics,
  });
  const series = finalEvals([
    ev(4, 0, { acc: 0.1, loss: 3 }),
    ev(8, 0, { acc: 0.2 }),
    ev(8, 0, { loss: 2 }), // another evaluation at the same step: both metrics are kept
    ev(8, 1, { acc: 0.25 }), // the resumed attempt repeats step 8
    ev(12, 1, { acc: 0.3, loss: 1 }),
  ]);
  assert.deepEqual([...series.keys()], ["acc", "loss"]);
  assert.deepEqual(series.get("acc"), [[4, 0.1], [8, 0.25], [12, 0.3]]);
  assert.deepEqual(series.get("loss"), [[4, 3], [8, 2], [12, 1]]);
});

Deno.test("metricsLine() writes non-finite losses and grad norms as strings that read back as numbers", () => {
  const m: MetricsRecord = { ...metricsOf(baseSpec(), 0, 0, 1)[0]!, loss: NaN, gradNorm: Infinity };
  const line = metricsLine(m);
  assert.match(line, /"loss":"NaN".*"gradNorm":"Infinity"/);
  assert.ok(line.endsWith("}\n"));
  const back = parseJsonLines(MetricsRecordSchema, line, "metrics.jsonl").records[0]!;
  assert.ok(Number.isNaN(back.loss));
  assert.equal(back.gradNorm, Infinity);
});

Deno.test("metricsLine() and dataOrderLine() refuse records a reader would reject, naming the field", () => {
  const m = metricsOf(baseSpec(), 0, 0, 1)[0]!;
  throwsType(() => metricsLine({ ...m, lr: NaN }), /Cannot write this metrics\.jsonl line: lr: /);
  throwsType(() => metricsLine({ ...m, step: -1 }), /step: Too small/);
  const d = dataOrderOf(baseSpec())[0]!;
  throwsType(
    () => dataOrderLine({ ...d, first: d.first.slice(1) }),
    /first: first must hold min\(16, count\) indices/,
  );
  throwsType(
    () => dataOrderLine({ ...d, sha256: "abc" }),
    /sha256: expected 64 lowercase hex digits/,
  );
});

Deno.test("readRunDir() names the file, line and field of a malformed metrics line", async () => {
  await withTempDir((root) => {
    const dir = writeRun(root, "a", baseSpec());
    const path = join(dir, "metrics.jsonl");
    const lines = Deno.readTextFileSync(path).split("\n");
    const rewrite = (i: number, text: string) => {
      const copy = [...lines];
      copy[i] = text;
      Deno.writeTextFileSync(path, copy.join("\n"));
    };
    rewrite(2, "garbage{");
    throwsType(
      () => readRunDir(dir),
      new RegExp(`^${path}:3: not valid JSON \\(.*\\): "garbage\\{"$`),
    );
    rewrite(4, lines[4]!.replace(/"loss":[^,]+/, `"loss":"low"`));
    throwsType(() => readRunDir(dir), new RegExp(`^${path}:5: loss: Invalid input`));
    rewrite(1, lines[1]!.slice(0, 30)); // a truncated line in the middle is an error, not a warning
    throwsType(() => readRunDir(dir), new RegExp(`^${path}:2: not valid JSON`));
  });
});

Deno.test("readRunDir() drops an unterminated, truncated last line with a warning and keeps the rest", async () => {
  await withTempDir((root) => {
    const dir = writeRun(root, "a", baseSpec());
    const path = join(dir, "metrics.jsonl");
    const text = Deno.readTextFileSync(path);
    Deno.writeTextFileSync(
      path,
      text + metricsLine(metricsOf(baseSpec(), 0, 12, 13)[0]!).slice(0, 40),
    );
    const r = readRunDir(dir);
    assert.equal(r.metrics.length, 12);
    assert.equal(r.warnings.length, 1);
    assert.match(
      r.warnings[0]!,
      new RegExp(`^${path}:13: not valid JSON.*ignored: the last line has no newline`),
    );
    // A complete last line without its newline is kept.
    Deno.writeTextFileSync(path, text.trimEnd());
    assert.equal(readRunDir(dir).metrics.length, 12);
    assert.deepEqual(readRunDir(dir).warnings, []);
  });
});

/** Deterministic pseudo-random numbers (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

Deno.test("readRunDir() either reads or names file and line for 300 corrupted metrics and data-order files", async () => {
  await withTempDir((root) => {
    const spec = baseSpec();
    spec.evalEvery = 3; // evaluation lines get corrupted too
    const dir = writeRun(root, "a", spec);
    const random = rng(20251129);
    const junk = ['"', "{", "}", ",", "\n", "x", "1e999", "null", "]", "\u0000", "é"];
    for (const file of ["metrics.jsonl", "data_order.jsonl"]) {
      const path = join(dir, file);
      const good = Deno.readTextFileSync(path);
      let read = 0, refused = 0;
      for (let i = 0; i < 150; i++) {
        let text = good;
        const edits = 1 + Math.floor(random() * 3);
        for (let k = 0; k < edits; k++) {
          const at = Math.floor(random() * text.length);
          const kind = random();
          if (kind < 0.3) text = text.slice(0, at); // truncation
          else if (kind < 0.6) {
            text = text.slice(0, at) + text.slice(at + 1 + Math.floor(random() * 20)); // deletion
          } else {text = text.slice(0, at) + junk[Math.floor(random() * junk.length)] +
              text.slice(at); // garbage
          }
        }
        Deno.writeTextFileSync(path, text);
        try {
          readRunDir(dir);
          read++;
        } catch (e) {
          assert.ok(e instanceof TypeError, `case ${i}: ${e}`);
          assert.match(e.message, new RegExp(`^${path}:\\d+: `), `case ${i}`);
          refused++;
        }
      }
      Deno.writeTextFileSync(path, good);
      assert.ok(
        refused > 50 && read > 5,
        `${file}: ${refused} refused, ${read} read: the cases should exercise both paths`,
      );
    }
  });
});

Deno.test("readRunDir() refuses a malformed run.json, naming the field or the line", async () => {
  await withTempDir((root) => {
    const dir = writeRun(root, "a", baseSpec());
    const path = join(dir, "run.json");
    const good = Deno.readTextFileSync(path);
    Deno.writeTextFileSync(path, good.slice(0, 200));
    throwsType(
      () => readRunDir(dir),
      new RegExp(`^${path}:${good.slice(0, 200).split("\n").length}: not valid JSON: `),
    );
    Deno.writeTextFileSync(path, good.replace('"name"', "name"));
    throwsType(() => readRunDir(dir), new RegExp(`^${path}:4: not valid JSON: `));
    const run = JSON.parse(good);
    Deno.writeTextFileSync(
      path,
      JSON.stringify({ ...run, world: { ...run.world, worldSize: "2" } }),
    );
    throwsType(
      () => readRunDir(dir),
      new RegExp(`^${path}: world\\.worldSize: Invalid input: expected number, received string`),
    );
    Deno.writeTextFileSync(path, JSON.stringify({ ...run, format: "dtrain.run/2" }));
    throwsType(() => readRunDir(dir), /format: Invalid input: expected "dtrain\.run\/1"/);
    Deno.removeSync(path);
    throwsType(() => readRunDir(dir), /is not a dtrain run directory: run\.json is missing/);
  });
});

Deno.test("RunRecordSchema checks worldSize = nnodes × nprocPerNode and the attempt sequence", () => {
  const run = runRecordOf(baseSpec(), "/tmp/x");
  const bad = RunRecordSchema.safeParse({ ...run, world: { ...run.world, worldSize: 3 } });
  assert.equal(bad.success, false);
  assert.match(
    describeIssues(bad.error!),
    /world\.worldSize: worldSize 3 != nnodes 1 × nprocPerNode 2/,
  );
  const a0 = run.attempts[0]!;
  const gap = RunRecordSchema.safeParse({ ...run, attempts: [a0, { ...a0, attempt: 2 }] });
  assert.match(describeIssues(gap.error!), /attempts\[1\]\.attempt: expected attempt 1/);
  const open = RunRecordSchema.safeParse({
    ...run,
    attempts: [{ ...a0, endedAt: null }, { ...a0, attempt: 1 }],
  });
  assert.match(
    describeIssues(open.error!),
    /attempts\[0\]\.endedAt: only the last attempt may still be open/,
  );
});

Deno.test("readRunDir() lists missing optional files and ignores unknown ones", async () => {
  await withTempDir((root) => {
    const dir = writeRun(root, "a", baseSpec());
    for (const f of ["config.json", "metrics.jsonl", "data_order.jsonl"]) {
      Deno.removeSync(join(dir, f));
    }
    Deno.mkdirSync(join(dir, "checkpoints"));
    Deno.writeTextFileSync(join(dir, "notes.txt"), "anything");
    const r = readRunDir(dir);
    assert.deepEqual(r.missing, ["config.json", "metrics.jsonl", "data_order.jsonl"]);
    assert.equal(r.config, null);
    assert.deepEqual(r.metrics, []);
    assert.deepEqual(r.dataOrder, []);
  });
});

Deno.test("finalSteps() keeps, for each step, the record of the latest attempt, in step order", () => {
  const spec = baseSpec();
  const first = metricsOf(spec, 0, 0, 6).map((m) => ({ ...m, loss: 9 }));
  const second = metricsOf(spec, 1, 4, 8);
  const steps = finalSteps([...second, ...first]);
  assert.deepEqual(steps.map((m) => m.step), [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(steps.map((m) => m.attempt), [0, 0, 0, 0, 1, 1, 1, 1]);
  assert.equal(steps[5]!.loss, spec.loss(5, spec.seed));
});
