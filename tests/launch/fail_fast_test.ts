/**
 * Fail-fast: when one rank throws, exits non-zero or dies, the launcher
 * stops every other rank (SIGTERM, then SIGKILL) within 5 s, leaves no
 * process behind, prints the failing rank's error and stack and what every
 * rank was doing, and exits with that rank's code. Ranks also die with a
 * launcher that is SIGKILLed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, SCRIPTS, TestRun, waitUntil } from "./launch_helpers.ts";

const FAIL_ONE = join(SCRIPTS, "fail_one.ts");

function childPids(t: TestRun): number[] {
  return [...Deno.readDirSync(t.pidDir)]
    .filter((e) => /^child-\d+\.pid$/.test(e.name))
    .map((e) => Number(Deno.readTextFileSync(join(t.pidDir, e.name))));
}

Deno.test("a rank that throws stops every rank within 5 s, and the launcher reports its error and stack", async () => {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "3", FAIL_ONE, "1", "throw", "500"], {
      env: { TEST_STUBBORN: "1" },
    });
    const r = await t.finish(l);
    const endedAt = Date.now();
    const failedAt = Number(Deno.readTextFileSync(join(t.pidDir, "failed-at")));
    assert.ok(
      endedAt - failedAt < 5000,
      `the launcher took ${endedAt - failedAt} ms after the failure`,
    );
    assert.equal(r.code, 1, r.stderr);
    const pids = t.pids();
    assert.equal(pids.size, 3);
    const children = childPids(t);
    assert.equal(children.length, 2, "both waiting ranks started a grandchild");
    for (const pid of [...pids.values(), ...children]) {
      assert.ok(!alive(pid), `process ${pid} is still alive`);
    }
    assert.match(r.stderr, /rank 1 \(node 0, pid \d+\) failed first: exit code 1/);
    assert.match(r.stderr, /^\[dtrain\] error: Error: rank 1 exploded on purpose$/m);
    assert.match(
      r.stderr,
      /^\[dtrain\]\s+at nestedHelper \(file:\/\/.*fail_one\.ts:\d+:\d+\)$/m,
      "the stack is printed",
    );
    // What the other ranks were doing: waiting at the barrier, then stopped.
    assert.match(r.stderr, /^\[dtrain\] 0 .*barrier "never" .*waiting/m);
    assert.match(r.stderr, /^\[dtrain\] 2 .*barrier "never" .*waiting/m);
    assert.match(
      r.stderr,
      /rank 0 killed by SIGKILL, rank 1 exit code 1, rank 2 killed by SIGKILL/,
    );
    assert.match(
      r.stderr,
      /rank 0 ignores SIGTERM/,
      "SIGTERM came first, SIGKILL after the grace period",
    );
  } finally {
    await t.cleanup();
  }
});

Deno.test("the launcher exits with the failing rank's exit code", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "3", FAIL_ONE, "2", "exit=7", "200"]));
    assert.equal(r.code, 7, r.stderr);
    assert.match(r.stderr, /rank 2 \(node 0, pid \d+\) failed first: exit code 7/);
    assert.match(
      r.stderr,
      /last lines of its stderr:\n\[dtrain\] {3}\| rank 2 exits with 7 on purpose/,
    );
    for (const pid of t.pids().values()) assert.ok(!alive(pid));
  } finally {
    await t.cleanup();
  }
});

Deno.test("an unhandled rejection fails the rank like a throw", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "2", FAIL_ONE, "0", "reject", "200"]));
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /rank 0 .*failed first: exit code 1/);
    assert.match(r.stderr, /^\[dtrain\] error: TypeError: rank 0 rejected on purpose$/m);
  } finally {
    await t.cleanup();
  }
});

Deno.test("a rank killed by a signal is reported with 128+signal and its last stderr lines", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "2", FAIL_ONE, "1", "kill", "200"]));
    assert.equal(r.code, 137, r.stderr);
    assert.match(r.stderr, /rank 1 .*failed first: killed by SIGKILL/);
    assert.match(r.stderr, /\| rank 1 is about to die without a word/);
  } finally {
    await t.cleanup();
  }
});

Deno.test("ranks die within a few seconds when their launcher is SIGKILLed", async () => {
  const t = new TestRun();
  try {
    // Rank 1 runs until stopped; rank 0 waits for it at a barrier.
    const l = t.launch(["--nproc", "2", FAIL_ONE, "1", "none"]);
    const pids = await t.ranksStarted(2);
    for (const pid of pids.values()) assert.ok(alive(pid));
    Deno.kill(l.pid, "SIGKILL");
    const took = await waitUntil(
      () => [...pids.values()].every((p) => !alive(p)),
      3000,
      "every rank died",
    );
    assert.ok(took < 3000);
  } finally {
    await t.cleanup();
  }
});

Deno.test("a rank blocked in a synchronous call dies with its SIGKILLed launcher (PDEATHSIG)", async () => {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "2", FAIL_ONE, "1", "block", "0"]);
    const pids = await t.ranksStarted(2);
    await new Promise((r) => setTimeout(r, 300)); // rank 1 is now blocked
    Deno.kill(l.pid, "SIGKILL");
    await waitUntil(() => !alive(pids.get(1)!), 2000, "the blocked rank died");
    await waitUntil(() => !alive(pids.get(0)!), 2000, "the waiting rank died");
  } finally {
    await t.cleanup();
  }
});
