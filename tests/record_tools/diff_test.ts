/**
 * Tests of record_tools/compare.ts and record_tools/diff.ts on pairs of synthetic run
 * directories that differ in exactly one thing each: the top hypothesis must
 * name that thing, and identical runs must agree (exit 0).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { compareRuns, type Comparison } from "../../record_tools/compare.ts";
import { flatten, launchOptions } from "../../record_tools/compare_setup.ts";
import { relDiff } from "../../record_tools/compare_results.ts";
import { diffMain } from "../../record_tools/diff.ts";
import { readRunDir } from "../../run_record/format.ts";
import {
  appendMetrics,
  beginAttempt,
  finishAttempt,
  writeRunRecord,
} from "../../run_record/record.ts";
import {
  baseSpec,
  metricsOf,
  runRecordOf,
  type RunSpec,
  withTempDir,
  writeRun,
} from "../run_record/_fixtures.ts";

/** Writes the base run and a run with `change` applied, and compares them. */
async function comparePair(change: (s: RunSpec) => void, lossTol = 1e-6): Promise<Comparison> {
  let result: Comparison | undefined;
  await withTempDir((root) => {
    const a = writeRun(root, "a", baseSpec());
    const spec = baseSpec();
    change(spec);
    const b = writeRun(root, "b", spec);
    result = compareRuns(readRunDir(a), readRunDir(b), { lossTol });
  });
  return result!;
}

const topics = (c: Comparison) => c.findings.map((f) => f.topic);

/** Runs diffMain and collects its exit code, stdout and stderr. */
async function runDiff(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [], err: string[] = [];
  const code = await diffMain(args, (t) => out.push(t), (t) => err.push(t));
  return { code, out: out.join("\n"), err: err.join("\n") };
}

Deno.test("compareRuns() finds nothing between two identical runs, and diffMain prints 'runs agree' with exit 0", async () => {
  assert.deepEqual(topics(await comparePair(() => {})), []);
  await withTempDir(async (root) => {
    const a = writeRun(root, "a", baseSpec());
    const b = writeRun(root, "b", baseSpec());
    const r = await runDiff([a, b]);
    assert.equal(r.code, 0, r.out + r.err);
    assert.match(
      r.out,
      /^runs agree \(compared: .*config.*data order.*losses \(12 steps, rel tol 1e-6\)\)$/m,
    );
  });
});

Deno.test("compareRuns() names a changed config value first", async () => {
  const c = await comparePair((s) =>
    s.config = { ...s.config, optimizer: { name: "adamw", lr: 0.0003 } }
  );
  assert.deepEqual(topics(c), ["config"]);
  assert.equal(c.findings[0]!.headline, "config: optimizer.lr 0.001 vs 0.0003");
});

const DEFAULT_POLICY = {
  autocast: "as-called" as const,
  lossScaling: true,
  clipping: true,
  dropout: true,
  deterministicReductions: true,
  tf32: false,
};

/** Compares a run of spec `sa` with one of spec `sb`. */
async function compareSpecs(sa: RunSpec, sb: RunSpec): Promise<Comparison> {
  let c: Comparison | undefined;
  await withTempDir((root) => {
    const a = readRunDir(writeRun(root, "a", sa)), b = readRunDir(writeRun(root, "b", sb));
    c = compareRuns(a, b, { lossTol: 1e-6 });
  });
  return c!;
}

Deno.test("compareRuns() names a changed numerics policy first, field by field, not again as config", async () => {
  const sa = baseSpec(), sb = baseSpec();
  sa.numerics = { ...DEFAULT_POLICY };
  sb.numerics = { ...DEFAULT_POLICY, clipping: false, autocast: "f32" };
  sb.config = { ...sb.config, numerics: { clipping: false, autocast: "f32" } };
  const c = await compareSpecs(sa, sb);
  assert.deepEqual(topics(c), ["numerics"]);
  assert.equal(
    c.findings[0]!.headline,
    'numerics policy: autocast "as-called" vs "f32"; clipping true vs false',
  );
  assert.deepEqual(c.findings[0]!.evidence, ["a: config.json, b: config.json"]);
  sb.numerics = { ...DEFAULT_POLICY };
  assert.ok((await compareSpecs(sa, sb)).compared.includes("numerics"));
});

Deno.test("compareRuns() names exact mode's shard count, and takes a run recorded before exact mode as exact false", async () => {
  const sa = baseSpec(), sb = baseSpec();
  sa.numerics = { ...DEFAULT_POLICY };
  sb.numerics = { ...DEFAULT_POLICY, exact: 8 };
  const c = await compareSpecs(sa, sb);
  assert.deepEqual(topics(c), ["numerics"]);
  assert.equal(c.findings[0]!.headline, "numerics policy: exact false vs 8");
  sb.numerics = { ...DEFAULT_POLICY, exact: false };
  assert.deepEqual(topics(await compareSpecs(sa, sb)), []);
});

Deno.test("compareRuns() reads the numerics policy from run.json when config.json lacks it, and notes an unrecorded one", async () => {
  const sa = baseSpec(), sb = baseSpec();
  sa.attemptNumerics = { ...DEFAULT_POLICY };
  sb.attemptNumerics = { ...DEFAULT_POLICY, lossScaling: false };
  const c = await compareSpecs(sa, sb);
  assert.deepEqual(topics(c), ["numerics"]);
  assert.equal(c.findings[0]!.headline, "numerics policy: lossScaling true vs false");
  assert.deepEqual(c.findings[0]!.evidence, ["a: run.json attempt 0, b: run.json attempt 0"]);
  const one = await comparePair((s) => s.numerics = { ...DEFAULT_POLICY });
  assert.deepEqual(topics(one), []);
  assert.ok(
    one.notes.some((n) => /numerics policy not compared: run a does not record one/.test(n)),
  );
  assert.ok(!(await comparePair(() => {})).compared.includes("numerics"));
});

Deno.test("compareRuns() names a changed seed first, with the data order and losses it changes after it", async () => {
  const c = await comparePair((s) => s.seed = 2);
  assert.deepEqual(topics(c), ["seed", "data order", "loss"]);
  assert.match(c.findings[0]!.headline, /^seed 1 vs 2/);
  assert.match(c.findings[1]!.headline, /first at epoch 0, rank 0/);
  assert.deepEqual(c.findings[1]!.evidence, ["may follow from the differences above (seed)"]);
  assert.match(
    c.findings[2]!.headline,
    /differ from the first common step; first difference at step 0/,
  );
});

Deno.test("compareRuns() names a changed world size first, then the data order it reshuffles", async () => {
  const c = await comparePair((s) => s.worldSize = 4);
  assert.deepEqual(topics(c), ["world.worldSize", "data order"]);
  assert.match(
    c.findings[0]!.headline,
    /^world size 2 vs 4: per-rank batch and reduction order differ/,
  );
  assert.match(
    c.findings[1]!.evidence[0]!,
    /may follow from the differences above \(world\.worldSize\)/,
  );
});

Deno.test("compareRuns() names the data order at epoch 2, rank 1 when only that digest differs", async () => {
  const c = await comparePair((s) => {
    s.editOrder = (d) =>
      d.epoch === 2 && d.rank === 1
        ? { ...d, sha256: "9b0c".padEnd(64, "f"), first: [...d.first].reverse() }
        : d;
  });
  assert.deepEqual(topics(c), ["data order"]);
  const f = c.findings[0]!;
  assert.match(
    f.headline,
    /^data order differs first at epoch 2, rank 1 \(sha256 [0-9a-f]{8}… vs 9b0cffff…; first indices \[/,
  );
  assert.match(f.check, /sampler or the dataset changed/);
});

Deno.test("compareRuns() names one changed environment variable with why it matters", async () => {
  const c = await comparePair((s) => s.env = { ...s.env, DTRAIN_NUM_THREADS: "2" });
  assert.deepEqual(topics(c), ["env:DTRAIN_NUM_THREADS"]);
  assert.match(
    c.findings[0]!.headline,
    /^environment: DTRAIN_NUM_THREADS 1 vs 2 \(kernel thread count changes how GEMM/,
  );
  const unset = await comparePair((s) => s.env = { DTRAIN_NUM_THREADS: "1" });
  assert.equal(
    unset.findings[0]!.headline.startsWith("environment: OMP_NUM_THREADS 1 vs (unset)"),
    true,
  );
});

Deno.test("compareRuns() names a different native library build", async () => {
  const c = await comparePair((s) => s.nativeCpu = "def0123456789abc");
  assert.deepEqual(topics(c), ["versions.native.cpu"]);
  assert.equal(
    c.findings[0]!.headline,
    "versions: native CPU library build a321783a… vs def01234…",
  );
});

Deno.test("compareRuns() names a changed script hash first", async () => {
  const c = await comparePair((s) => s.scriptSha = "9b0c".padEnd(64, "1"));
  assert.deepEqual(topics(c), ["script"]);
  assert.equal(
    c.findings[0]!.headline,
    "script changed: sha256 3fa10000… vs 9b0c1111… (train.ts edited?)",
  );
});

Deno.test("compareRuns() names the loss at step 7 when it differs beyond the tolerance, then non-determinism", async () => {
  const bump = (s: RunSpec) => {
    const base = s.loss;
    s.loss = (step, seed) => step === 7 ? base(step, seed) * (1 + 2.6e-4) : base(step, seed);
  };
  const c = await comparePair(bump);
  assert.deepEqual(topics(c), ["loss", "non-determinism"]);
  assert.match(
    c.findings[0]!.headline,
    /^losses agree to 1e-6 up to step 6; first difference at step 7: \S+ vs \S+ \(rel 2\.6e-4\)$/,
  );
  assert.ok(c.findings[1]!.evidence.includes("thread count DTRAIN_NUM_THREADS: 1 in both"));
  assert.ok(c.findings[1]!.evidence.includes("native library build: a321783a1a851864 in both"));
});

Deno.test("compareRuns() honours the loss tolerance: 1e-7 apart agrees at 1e-6, differs at 1e-8", async () => {
  const tiny = (s: RunSpec) => {
    const base = s.loss;
    s.loss = (step, seed) => step === 7 ? base(step, seed) * (1 + 1e-7) : base(step, seed);
  };
  assert.deepEqual(topics(await comparePair(tiny, 1e-6)), []);
  assert.deepEqual(topics(await comparePair(tiny, 1e-8)), ["loss", "non-determinism"]);
});

Deno.test("compareRuns() ranks several differences: script, seed, config, world size, environment, versions, loss", async () => {
  const c = await comparePair((s) => {
    s.scriptSha = "9".repeat(64);
    s.seed = 5;
    s.config = { ...s.config, batchSize: 8 };
    s.worldSize = 4;
    s.env = { ...s.env, TZ: "UTC", DTRAIN_NUM_THREADS: "4" };
    s.nativeCpu = "0".repeat(16);
  });
  assert.deepEqual(topics(c), [
    "script",
    "seed",
    "config",
    "world.worldSize",
    "data order",
    "env:DTRAIN_NUM_THREADS",
    "versions.native.cpu",
    "env:TZ",
    "loss",
  ]);
});

Deno.test("a resumed run that repeats steps agrees with an uninterrupted one; its failed attempt stays recorded", async () => {
  await withTempDir(async (root) => {
    const a = writeRun(root, "a", baseSpec());
    const spec = baseSpec();
    const b = join(root, "b");
    Deno.mkdirSync(b);
    let run = runRecordOf(spec, b);
    run = { ...run, attempts: [], status: "running" };
    run = finishAttempt(beginAttempt(run), {
      exitCode: 1,
      failingRank: 1,
      reason: "rank 1 exit 1",
    });
    run = finishAttempt(beginAttempt(run), { exitCode: 0 });
    writeRunRecord(b, run);
    // attempt 0 logged steps 0-8 with a wrong loss from step 6 on; attempt 1 resumed at step 5
    for (const m of metricsOf(spec, 0, 0, 9)) {
      appendMetrics(b, m.step >= 6 ? { ...m, loss: 99 } : m);
    }
    for (const m of metricsOf(spec, 1, 5, spec.steps)) appendMetrics(b, m);
    Deno.copyFileSync(join(a, "config.json"), join(b, "config.json"));
    Deno.copyFileSync(join(a, "data_order.jsonl"), join(b, "data_order.jsonl"));
    const r = await runDiff([a, b]);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /runs agree/);
    assert.match(r.out, /attempts: run a made 1, run b 2/);
    const read = readRunDir(b);
    assert.equal(read.run.attempts[0]!.exitCode, 1);
    assert.equal(read.run.attempts[0]!.failingRank, 1);
  });
});

Deno.test("diffMain exits 1 and prints numbered hypotheses, each with a check", async () => {
  await withTempDir(async (root) => {
    const a = writeRun(root, "a", baseSpec());
    const spec = baseSpec();
    spec.seed = 7;
    const b = writeRun(root, "b", spec);
    const r = await runDiff([a, b, "--loss-tol", "1e-3"]);
    assert.equal(r.code, 1);
    const lines = r.out.split("\n");
    assert.equal(lines[1], "3 differences, most likely cause first:");
    assert.match(lines[2]!, /^1\. seed 1 vs 7/);
    assert.match(lines[3]!, /^ {3}check: rerun with the same seed$/);
    assert.match(r.out, /^2\. data order differs/m);
    assert.match(r.out, /^3\. losses differ/m);
  });
});

Deno.test("diffMain notes a missing optional file instead of failing, and still compares the rest", async () => {
  await withTempDir(async (root) => {
    const a = writeRun(root, "a", baseSpec());
    const b = writeRun(root, "b", baseSpec());
    Deno.removeSync(join(b, "data_order.jsonl"));
    const r = await runDiff([a, b]);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /runs agree/);
    assert.match(r.out, /data order not compared: data_order\.jsonl is missing in run b/);
  });
});

Deno.test("diffMain exits 2 with a clear message for bad arguments and unreadable run directories", async () => {
  await withTempDir(async (root) => {
    const a = writeRun(root, "a", baseSpec());
    assert.equal((await runDiff([a])).code, 2);
    const tol = await runDiff([a, a, "--loss-tol", "abc"]);
    assert.equal(tol.code, 2);
    assert.match(tol.err, /--loss-tol must be a number >= 0, got "abc"/);
    const missing = await runDiff([a, join(root, "nope")]);
    assert.equal(missing.code, 2);
    assert.match(missing.err, /nope is not a dtrain run directory: run\.json is missing/);
    Deno.writeTextFileSync(join(a, "metrics.jsonl"), "{}\n", { append: true });
    const bad = await runDiff([a, a]);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /metrics\.jsonl:13: step: Invalid input/);
  });
});

Deno.test("flatten(), relDiff() and launchOptions() handle the edge cases diff relies on", () => {
  assert.deepEqual([...flatten({ a: { b: [1, { c: 2 }] }, d: [], e: null })], [
    ["a.b[0]", "1"],
    ["a.b[1].c", "2"],
    ["d", "[]"],
    ["e", "null"],
  ]);
  assert.equal(relDiff(NaN, NaN), 0);
  assert.equal(relDiff(2, NaN), Infinity);
  assert.equal(relDiff(0, 0), 0);
  assert.equal(relDiff(1, 1.5), 1 / 3);
  assert.deepEqual(
    launchOptions([
      "dtrain",
      "--nproc",
      "2",
      "--threads",
      "3",
      "--run-dir=/x",
      "--master-port",
      "1",
      "t.ts",
      "--lr",
      "1",
    ], ["--lr", "1"]),
    ["--threads", "3"],
  );
});
