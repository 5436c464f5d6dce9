/**
 * The collective runner that every backend goes through, with a recording
 * backend in place of a transport: what the backend is handed, when the
 * launcher hears of a call, what a bad argument, a failure, a closed group and
 * a deferred Work do. The real backends' behaviour is tested by their own
 * multi-process tests; this pins the part they share.
 */
import assert from "node:assert/strict";
import {
  type CollectiveBackend,
  CollectiveRunner,
} from "../../distributed/backends/collective_runner.ts";
import type { Collective } from "../../distributed/backends/collective_args.ts";
import { type CollectiveRecord, setPhaseSink } from "../../distributed/control/phase.ts";
import { COMPLETED, type Work } from "../../distributed/process_group.ts";

/** A backend that records what it is asked, and the launcher's view of the calls. */
function recording(overrides: Partial<CollectiveBackend> = {}) {
  const performed: { c: Collective; seq: number; timeoutMs: number; deferred: boolean }[] = [];
  const aborts: string[] = [];
  const reports: string[] = [];
  setPhaseSink({
    phase() {},
    collective(rec: CollectiveRecord, s: "enter" | "exit") {
      reports.push(`${s} ${rec.op}#${rec.seq} ${rec.bytes}${rec.detail ? ` ${rec.detail}` : ""}`);
    },
  });
  const backend: CollectiveBackend = {
    groupName: "test process group",
    hostOnly: null,
    abortForBadArguments: (reason) => aborts.push(reason),
    perform: (c, seq, timeoutMs, deferred) => {
      performed.push({ c, seq, timeoutMs, deferred });
      return COMPLETED;
    },
    failed: (e) => new Error(`wrapped: ${(e as Error).message}`),
    ...overrides,
  };
  return { runner: new CollectiveRunner(backend, 1, 4, 5000), performed, aborts, reports };
}

Deno.test("the runner numbers calls, hands the backend checked calls and reports enter and exit", () => {
  try {
    const { runner, performed, reports } = recording();
    const buf = new Float32Array(8);
    runner.allReduce(buf, "avg", {});
    runner.broadcast(buf, 3, { timeoutMs: 77 });
    runner.allGather(new Float32Array(32), buf, {});
    runner.reduceScatter(new Float32Array(2), buf, "max", {});
    runner.barrier("epoch end", {});
    assert.deepEqual(
      performed.map((p) => [p.seq, p.c.op, p.c.count, p.c.reduceOp, p.c.root, p.c.name]),
      [
        [1, "allReduce", 8, "avg", -1, ""],
        [2, "broadcast", 8, "sum", 3, ""],
        [3, "allGather", 8, "sum", -1, ""],
        [4, "reduceScatter", 2, "max", -1, ""],
        [5, "barrier", 0, "sum", -1, "epoch end"],
      ],
    );
    assert.deepEqual(performed.map((p) => p.timeoutMs), [5000, 77, 5000, 5000, 5000]);
    assert.deepEqual(reports, [
      "enter allReduce#1 32",
      "exit allReduce#1 32",
      "enter broadcast#2 32 root 3",
      "exit broadcast#2 32 root 3",
      "enter allGather#3 32",
      "exit allGather#3 32",
      "enter reduceScatter#4 8",
      "exit reduceScatter#4 8",
      "enter barrier#5 0 epoch end",
      "exit barrier#5 0 epoch end",
    ]);
  } finally {
    setPhaseSink(null);
  }
});

Deno.test("a bad argument aborts the group with a reason naming the call, and reaches no transport", () => {
  try {
    const { runner, performed, aborts, reports } = recording();
    assert.throws(
      () => runner.broadcast(new Float32Array(2), 4, {}),
      /^RangeError: broadcast: root 4 is not a rank of this group \(size 4\)$/,
    );
    assert.throws(
      () => runner.allReduce(new Int32Array(2), "avg", {}),
      /allReduce: avg needs a floating dtype/,
    );
    assert.throws(
      () => runner.barrier("b", { timeoutMs: -5 }),
      /barrier: timeoutMs must be a positive number, got -5/,
    );
    assert.throws(
      () => runner.allGather(new Float32Array(3), new Float32Array(1), {}),
      /allGather: out has 3 and inp 1 elements: expected out = 4 x inp = 4 elements/,
    );
    assert.deepEqual(aborts, [
      "rank 1 called broadcast #1 with bad arguments: broadcast: root 4 is not a rank of this group (size 4)",
      "rank 1 called allReduce #2 with bad arguments: allReduce: avg needs a floating dtype (f32, f64, bf16, f16), got i32",
      "rank 1 called barrier #3 with bad arguments: barrier: timeoutMs must be a positive number, got -5",
      "rank 1 called allGather #4 with bad arguments: allGather: out has 3 and inp 1 elements: expected out = 4 x inp = 4 elements",
    ]);
    assert.equal(performed.length, 0);
    assert.deepEqual(reports, [], "a refused call is never reported as entered");
  } finally {
    setPhaseSink(null);
  }
});

Deno.test("a host-only backend refuses GPU memory, and a backend's own checks count as bad arguments", () => {
  try {
    const { runner, aborts } = recording({
      hostOnly: "test process group",
      checkArgs: (c) => {
        if (c.op === "reduceScatter") throw new TypeError("reduceScatter: not here");
      },
    });
    const gpu = { ptr: Deno.UnsafePointer.create(4096n), count: 4, dtype: "f32" as const };
    assert.throws(
      () => runner.allReduce({ ...gpu, device: "cuda" }, "sum", {}),
      /allReduce buf is GPU memory, but the test process group reads and writes buffers on the host/,
    );
    assert.throws(
      () => runner.reduceScatter(new Float32Array(1), new Float32Array(4), "sum", {}),
      /reduceScatter: not here/,
    );
    assert.equal(aborts.length, 2);
    assert.match(
      aborts[1]!,
      /^rank 1 called reduceScatter #2 with bad arguments: reduceScatter: not here$/,
    );
  } finally {
    setPhaseSink(null);
  }
});

Deno.test("a failure inside the transport is the backend's error, and the call is still reported as left", () => {
  try {
    const { runner, reports } = recording({
      perform: () => {
        throw new Error("peer vanished");
      },
    });
    assert.throws(
      () => runner.allReduce(new Float32Array(1), "sum", {}),
      /^Error: wrapped: peer vanished$/,
    );
    assert.deepEqual(reports, ["enter allReduce#1 4", "exit allReduce#1 4"]);
  } finally {
    setPhaseSink(null);
  }
});

Deno.test("a closed or failed group refuses calls before anything else; close() says whether it was open", () => {
  try {
    let failure: Error | null = null;
    const { runner, aborts } = recording({
      requireHealthy: (op) => {
        if (failure) throw new Error(`${op}: failed earlier: ${failure.message}`);
      },
    });
    failure = new Error("timeout on rank 2");
    assert.throws(
      () => runner.broadcast(new Float32Array(1), 9, {}),
      /^Error: broadcast: failed earlier: timeout on rank 2$/,
    );
    failure = null;
    assert.equal(runner.closed, false);
    assert.equal(runner.close(), true);
    assert.equal(runner.close(), false);
    assert.throws(
      () => runner.barrier("x", {}),
      /^Error: barrier: the test process group is closed$/,
    );
    assert.deepEqual(aborts, [], "refusals are not bad arguments");
  } finally {
    setPhaseSink(null);
  }
});

Deno.test("a deferred allReduce is reported as left when its Work is waited for, once", () => {
  try {
    let waits = 0;
    const pending: Work = { wait: () => void waits++ };
    const { runner, reports } = recording({
      perform: (_c, _seq, _t, deferred) => deferred ? pending : COMPLETED,
    });
    const work = runner.allReduceStart(new Float32Array(2), "sum", {});
    assert.notEqual(work, pending, "the runner's Work reports the exit");
    assert.deepEqual(reports, ["enter allReduce#1 8"]);
    work.wait();
    work.wait();
    assert.equal(waits, 1);
    assert.deepEqual(reports, ["enter allReduce#1 8", "exit allReduce#1 8"]);
    // not deferred: the backend completes the call, and its exit is reported at once
    runner.allReduce(new Float32Array(2), "sum", {});
    assert.deepEqual(reports.slice(2), ["enter allReduce#2 8", "exit allReduce#2 8"]);
  } finally {
    setPhaseSink(null);
  }
});
