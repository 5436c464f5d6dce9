/**
 * The device check's op sweep (scripts/gpu_check/sweep.ts): it goes on after
 * a case that fails on a healthy device, and stops at the first failing case
 * once the device no longer works (a sticky CUDA error), naming that case.
 */
import assert from "node:assert/strict";
import type { Case, Outcome } from "../../scripts/gpu_check/_harness.ts";
import { runSweep } from "../../scripts/gpu_check/sweep.ts";

function fakeCase(op: string): Case {
  return { op, symbols: [`dt_${op}` as never], dtype: "f32", size: "7", tol: 0, call: () => 0 };
}

const cases = ["add", "gelu", "softmax", "layernorm", "adamw"].map(fakeCase);
const ok: Outcome = { ok: true, err: 0, detail: "" };
const bad: Outcome = { ok: false, err: Infinity, detail: "status 5" };

Deno.test("runSweep() goes on after a failing case while the device still works", () => {
  const lines: string[] = [];
  const r = runSweep(cases, (c) => (c.op === "gelu" ? bad : ok), () => null, (l) => lines.push(l));
  assert.equal(r.failed, 1);
  assert.equal(r.stoppedAt, null);
  assert.deepEqual([...r.covered].sort(), ["dt_adamw", "dt_add", "dt_layernorm", "dt_softmax"]);
  assert.equal(lines.length, 1 + cases.length);
});

Deno.test("runSweep() stops at the first failing case once the device is broken, and names it", () => {
  let broken = false, ran: string[] = [];
  const r = runSweep(
    cases,
    (c) => {
      ran.push(c.op);
      if (c.op === "softmax") broken = true; // the kernel that broke the context
      if (c.op === "layernorm") throw new Error("unreachable: the sweep stopped");
      return broken ? bad : ok;
    },
    () => (broken ? "an illegal memory access was encountered" : null),
    () => {},
  );
  assert.deepEqual(ran, ["add", "gelu", "softmax"]);
  assert.equal(r.stoppedAt?.case.op, "softmax");
  assert.equal(r.stoppedAt?.why, "an illegal memory access was encountered");
  ran = [];
});

Deno.test("runSweep() counts a case that throws as a failure", () => {
  const r = runSweep(
    [fakeCase("x")],
    () => {
      throw new Error("boom");
    },
    () => null,
    () => {},
  );
  assert.equal(r.failed, 1);
});
