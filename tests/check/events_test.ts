/** Tests of check/events.ts: parsing the probe's files and cutting a rank's events into optimizer steps. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { parseEvents, readRankEvents, stepsOf } from "../../check/events.ts";
import type { ProbeEvent } from "../../check/probe.ts";

Deno.test("stepsOf() sums accumulated losses per step and keeps the first backward's parameters", () => {
  const events: ProbeEvent[] = [
    { kind: "loss", value: 0.25 },
    { kind: "params", tensors: ["a", "b"] },
    { kind: "loss", value: 0.5 },
    { kind: "params", tensors: ["a", "b"] },
    { kind: "step", gradNorm: 2 },
    { kind: "checkpoint", dir: "/x/step-00000001", step: 1 },
    { kind: "loss", value: 1 },
    { kind: "params", tensors: ["c", "d"] },
    { kind: "step", gradNorm: 3 },
    { kind: "loss", value: 9 }, // a backward whose step the probe cut off
  ];
  assert.deepEqual(stepsOf(events), [
    { loss: 0.75, gradNorm: 2, params: ["a", "b"], samples: null },
    { loss: 1, gradNorm: 3, params: ["c", "d"], samples: null },
  ]);
  assert.deepEqual(stepsOf([{ kind: "step", gradNorm: 0 }]), [{
    loss: 0,
    gradNorm: 0,
    params: null,
    samples: null,
  }]);
});

Deno.test("stepsOf() gives a step the batches its backward passes used, not an evaluation's or a peek's", () => {
  const events: ProbeEvent[] = [
    { kind: "batch", indices: [9, 8] }, // a peek: no backward follows
    { kind: "batch", indices: [1, 2] },
    { kind: "loss", value: 0.5 },
    { kind: "batch", indices: [3, 4] },
    { kind: "loss", value: 0.5 },
    { kind: "step", gradNorm: 1, lr: 0.1, rng: "g", optimizer: "o", plainOff: ["dropout"] },
    { kind: "batch", indices: [50] }, // evaluation batches
    { kind: "batch", indices: [51] },
    { kind: "batch", indices: [5, 6] },
    { kind: "loss", value: 0.25 },
    { kind: "step", gradNorm: 2 },
  ];
  const steps = stepsOf(events);
  assert.deepEqual(steps.map((s) => s.samples), [[1, 2, 3, 4], [5, 6]]);
  assert.deepEqual(
    [steps[0]!.lr, steps[0]!.rng, steps[0]!.optimizer, steps[0]!.plainOff],
    [0.1, "g", "o", ["dropout"]],
  );
});

Deno.test("parseEvents() names the file and line of a line that is not a probe event", () => {
  assert.equal(
    parseEvents('{"kind":"loss","value":1}\n\n{"kind":"step","gradNorm":2}\n', "f").length,
    2,
  );
  assert.throws(
    () => parseEvents('{"kind":"loss","value":1}\n{"kind":"lo', "rank-1.jsonl"),
    /rank-1\.jsonl:2: not JSON/,
  );
  assert.throws(
    () => parseEvents('{"kind":"weird"}', "rank-0.jsonl"),
    /rank-0\.jsonl:1: not a probe event \(kind "weird"\)/,
  );
});

Deno.test("readRankEvents() reads rank-<r>.jsonl by rank and ignores other files", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-events-" });
  try {
    Deno.writeTextFileSync(join(dir, "rank-1.jsonl"), '{"kind":"step","gradNorm":1}\n');
    Deno.writeTextFileSync(join(dir, "rank-0.jsonl"), '{"kind":"loss","value":1}\n');
    Deno.mkdirSync(join(dir, "checkpoints"));
    Deno.writeTextFileSync(join(dir, "notes.txt"), "x");
    const byRank = readRankEvents(dir);
    assert.deepEqual([...byRank.keys()], [0, 1]);
    assert.deepEqual(byRank.get(1), [{ kind: "step", gradNorm: 1 }]);
    assert.equal(readRankEvents(join(dir, "absent")).size, 0);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
