/**
 * Tests of check/probe.ts in a real process (the probe ends processes, so
 * each case runs tests/check/scripts/probe_loop.ts as a child with the
 * probe preloaded, as `dtrain check` runs a script without the launcher):
 * what it records, where it stops a run, the plain arithmetic switch (in a
 * Trainer visible in config.json), the checkpoints it keeps from rotation,
 * and that it is silent when off.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { parseEvents } from "../../check/events.ts";
import { type ProbeEvent, tensorDigest } from "../../check/probe.ts";
import { PLAIN_NUMERICS } from "../../tensor/numerics_policy.ts";
import { CHECK_ENV } from "../../check/env.ts";
import { CheckpointManager } from "../../train/checkpoint/manager.ts";
import { REPO } from "./_helpers.ts";

const SCRIPT = join(REPO, "tests/check/scripts/probe_loop.ts");
const PROBE_MAIN = join(REPO, "check/probe_main.ts");

interface ProbeRun {
  code: number;
  stdout: string;
  stderr: string;
  events: ProbeEvent[];
  /** the probe folder */
  out: string;
  /** the script's own checkpoint folder */
  checkpoints: string;
}

/** Runs the loop with the probe's variables `env` (DTRAIN_CHECK_OUT set unless `probe` is false) in a temporary folder. */
async function probeRun(
  env: Record<string, string>,
  fn: (r: ProbeRun) => void,
  probe = true,
): Promise<void> {
  const tmp = Deno.makeTempDirSync({ prefix: "dtrain-probe-" });
  try {
    const out = join(tmp, "probe");
    Deno.mkdirSync(out);
    const checkpoints = join(tmp, "ckpt");
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        join(REPO, "deno.json"),
        "--preload",
        PROBE_MAIN,
        SCRIPT,
        checkpoints,
      ],
      env: { ...env, ...(probe ? { [CHECK_ENV.OUT]: out } : {}) },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const file = join(out, "rank-0.jsonl");
    let text = "";
    try {
      text = Deno.readTextFileSync(file);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
    const dec = new TextDecoder();
    fn({
      code,
      stdout: dec.decode(stdout),
      stderr: dec.decode(stderr),
      events: parseEvents(text, file),
      out,
      checkpoints,
    });
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
}

const count = (events: ProbeEvent[], kind: ProbeEvent["kind"]) =>
  events.filter((e) => e.kind === kind).length;
const lines = (text: string, line: string) => text.split("\n").filter((l) => l === line).length;

Deno.test("probe in the sampler stage: one batch per pass, ends the process at the third training pass", async () => {
  await probeRun({ [CHECK_ENV.STAGE]: "sampler" }, (r) => {
    assert.equal(r.code, 0, r.stderr);
    assert.equal(lines(r.stdout, "batch"), 2, "each pass yields its first batch only");
    assert.equal(lines(r.stdout, "finished"), 0, "the probe ended the process at the third pass");
    assert.deepEqual(r.events.filter((e) => e.kind === "batch").map((e) => e.indices.length), [
      20,
      20,
    ]);
    const passes = r.events.filter((e) => e.kind === "sampler");
    assert.deepEqual(
      passes.map((p) => [p.epoch, p.rank, p.numReplicas, p.datasetLength, p.indices.length]),
      [[0, 0, 1, 200, 200], [1, 0, 1, 200, 200]],
    );
    assert.deepEqual(
      [...passes[0]!.indices].sort((a, b) => a - b),
      Array.from({ length: 200 }, (_, i) => i),
    );
  });
});

Deno.test("probe with DTRAIN_CHECK_STOP_AFTER=3: records 3 steps, stops before the 4th update, keeps every checkpoint", async () => {
  await probeRun({ [CHECK_ENV.STOP_AFTER]: "3", [CHECK_ENV.PLAIN]: "1" }, (r) => {
    assert.equal(r.code, 0, r.stderr);
    assert.equal(
      lines(r.stdout, "batch"),
      4,
      "the 4th batch runs forward and backward, then the probe stops it",
    );
    assert.equal(lines(r.stdout, "finished"), 0);
    assert.deepEqual(
      [count(r.events, "step"), count(r.events, "loss"), count(r.events, "params")],
      [3, 4, 4],
    );
    const steps = r.events.filter((e) => e.kind === "step");
    assert.ok(
      steps.every((s) => s.gradNorm > 1e-3),
      `plain arithmetic records unclipped norms: ${steps.map((s) => s.gradNorm)}`,
    );
    const kept = r.events.filter((e) => e.kind === "checkpoint");
    assert.deepEqual(kept.map((c) => c.step), [1, 2, 3]);
    assert.deepEqual(
      [...Deno.readDirSync(r.checkpoints)].filter((e) => e.isDirectory).map((e) => e.name),
      ["step-00000003"],
      "keepLast 1 rotated the others away",
    );
    // The kept copies survive rotation, verify, and hold the parameters the next backward used.
    const params = r.events.filter((e) => e.kind === "params");
    for (const c of kept) {
      assert.equal(c.copy, join(r.out, "checkpoints", `step-0000000${c.step}`));
      const model = new CheckpointManager(join(r.out, "checkpoints"), { rank: 0 }).load(c.copy!)
        .files.get("model")!;
      const digests = new Set([...model.tensors.values()].map((t) => tensorDigest(t.data)));
      assert.equal(params[c.step]!.tensors.length, 4);
      assert.ok(
        params[c.step]!.tensors.every((d) => digests.has(d)),
        `checkpoint of step ${c.step} = parameters of backward ${c.step + 1}`,
      );
    }
    assert.notDeepEqual(
      params[0]!.tensors,
      params[1]!.tensors,
      "the parameters change with each update",
    );
  });
});

Deno.test("probe without DTRAIN_CHECK_PLAIN leaves clipping on", async () => {
  await probeRun({ [CHECK_ENV.STOP_AFTER]: "2" }, (r) => {
    assert.equal(r.code, 0, r.stderr);
    const norms = r.events.filter((e) => e.kind === "step").map((s) => s.gradNorm);
    assert.equal(norms.length, 2);
    assert.ok(norms.every((g) => g < 2e-6), `clipped to 1e-6: ${norms}`);
  });
});

Deno.test("probe is silent without DTRAIN_CHECK_OUT: the script runs to its end and nothing is recorded", async () => {
  await probeRun({ [CHECK_ENV.STOP_AFTER]: "1", [CHECK_ENV.STAGE]: "sampler" }, (r) => {
    assert.equal(r.code, 0, r.stderr);
    assert.equal(lines(r.stdout, "batch"), 30, "3 epochs of 10 batches");
    assert.equal(lines(r.stdout, "finished"), 1);
    assert.equal(r.events.length, 0);
  }, false);
});

Deno.test("probe with plain arithmetic and a step limit sets a Trainer's numerics policy and step limit, which config.json shows; the log says clipping is off once", async () => {
  const tmp = Deno.makeTempDirSync({ prefix: "dtrain-probe-trainer-" });
  try {
    const [out, runDir] = [join(tmp, "probe"), join(tmp, "run")];
    Deno.mkdirSync(out);
    Deno.mkdirSync(runDir);
    const r = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        join(REPO, "deno.json"),
        "--preload",
        PROBE_MAIN,
        join(REPO, "tests/check/scripts/trainer_ok.ts"),
      ],
      env: {
        [CHECK_ENV.OUT]: out,
        [CHECK_ENV.PLAIN]: "1",
        [CHECK_ENV.MAX_STEPS]: "2",
        [CHECK_ENV.CKPT_EVERY]: "1",
        DTRAIN_RUN_DIR: runDir,
      },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
    const record = JSON.parse(Deno.readTextFileSync(join(runDir, "config.json")));
    const config = record.config;
    assert.equal(config.maxSteps, 2);
    assert.equal(config.checkpoint.everySteps, 1);
    assert.equal(config.clipGradNorm, 1.0, "the script's own setting stays recorded");
    assert.deepEqual(config.numerics, PLAIN_NUMERICS, "the policy that overrides it");
    assert.deepEqual(record.numerics, PLAIN_NUMERICS);
    const stderr = new TextDecoder().decode(r.stderr);
    const said = stderr.split("\n").filter((l) => /numerics policy .*clipping is off/.test(l));
    assert.equal(said.length, 1, `said once over 2 steps:\n${stderr}`);
    assert.match(
      said[0]!,
      /set by the Trainer's config\): clipping is off: clipGradNorm\(maxNorm 1\)/,
    );
    const file = join(out, "rank-0.jsonl");
    const events = parseEvents(Deno.readTextFileSync(file), file);
    assert.equal(count(events, "step"), 2);
    // Every step is saved (the last one again at the run's end).
    const saved = events.filter((e) => e.kind === "checkpoint").map((c) => c.step);
    assert.deepEqual([...new Set(saved)], [1, 2]);
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
});
