/**
 * One rank of the NCCL process group tests (tests/distributed/nccl_group_test.ts),
 * on the emulated GPU with the NCCL stand-in: `deno run -A nccl_rank.ts <scenario>`
 * with the launcher's environment (a store of the test's own). Prints JSON
 * lines: {event: "result", ...} per check, {event: "error", message, ms} when
 * the scenario's expected failure happens, {event: "closed", live} at the end.
 */
import { useDevice } from "../../../tensor/device_choice.ts";
import { fromArray, type Tensor } from "../../../tensor/tensor.ts";
import { NcclProcessGroup } from "../../../distributed/backends/nccl_backend.ts";
import { initProcessGroup } from "../../../distributed/init_process_group.ts";
import type { ProcessGroup } from "../../../distributed/process_group.ts";
import { ncclLibrary } from "../../../ffi/nccl.ts";
import { findLibrary } from "../../../ffi/native.ts";
import { hostSyncCounts } from "../../../tensor/host_sync.ts";
import { failureKind } from "../../../distributed/control/failure_kind.ts";

const scenario = Deno.args[0] ?? "collectives";
const rank = Number(Deno.env.get("RANK"));
const size = Number(Deno.env.get("WORLD_SIZE"));

function say(event: string, fields: Record<string, unknown> = {}): void {
  console.log(JSON.stringify({ event, rank, ...fields }));
}

function dev(t: Tensor) {
  return { ptr: t.ptr, count: t.numel, dtype: "f32" as const, device: "cuda" as const };
}

function values(t: Tensor): number[] {
  return [...(t.toArray() as Float32Array)];
}

/** The emulated device's own count of host waits for the device (cudaStreamSynchronize and the like). */
const emulator = Deno.dlopen(findLibrary("libdtrain_cudart_emu.so"), {
  dt_emu_host_waits: { parameters: [], result: "u64" },
});
function deviceWaits(): number {
  return Number(emulator.symbols.dt_emu_host_waits());
}

/** Communicators of the stand-in not freed yet (0 after a clean close or an abort). */
function live(): number {
  return ncclLibrary().symbols.dt_nccl_emu_live_communicators?.() ?? -1;
}

/** Runs fn, reporting its error (message, failure kind, ms since `t0`) as the scenario's outcome. */
function expectFailure(t0: number, fn: () => void): void {
  try {
    fn();
    say("no-error", { ms: Date.now() - t0 });
  } catch (e) {
    say("error", {
      message: (e as Error).message,
      kind: failureKind(e),
      ms: Date.now() - t0,
    });
  }
}

function closeTwice(pg: ProcessGroup): void {
  pg.close();
  pg.close();
  say("closed", { live: live() });
}

useDevice("cuda-emu");

if (scenario === "collectives") {
  const pg = initProcessGroup();
  say("group", { backend: pg.backend, size: pg.size });
  const a = fromArray(Float32Array.from([1, 2, 3], (v) => v * (rank + 1)));
  pg.allReduce(dev(a), "sum");
  say("result", { name: "allReduce sum", values: values(a) });
  const m = fromArray(Float32Array.of(rank, -rank));
  pg.allReduce(dev(m), "max");
  say("result", { name: "allReduce max", values: values(m) });
  const host = Float32Array.of(rank + 0.5);
  pg.allReduce(host, "avg");
  say("result", { name: "allReduce avg host", values: [...host] });
  const b = fromArray(Float32Array.of(rank * 10, rank * 10 + 1));
  pg.broadcast(dev(b), size - 1);
  say("result", { name: "broadcast", values: values(b) });
  const g = fromArray(new Float32Array(2 * size));
  pg.allGather(dev(g), dev(fromArray(Float32Array.of(rank, rank + 100))));
  say("result", { name: "allGather", values: values(g) });
  const rs = fromArray(new Float32Array(2));
  pg.reduceScatter(dev(rs), dev(fromArray(Float32Array.from({ length: 2 * size }, (_, i) => i))));
  say("result", { name: "reduceScatter", values: values(rs) });
  // overlap: three reductions in flight at once, each waited for on the GPU only
  const buckets = [1, 2, 3].map((k) => fromArray(new Float32Array(1000).fill(k * (rank + 1))));
  const before = hostSyncCounts().total, beforeDevice = deviceWaits();
  const works = buckets.map((t) => pg.allReduceStart(dev(t), "avg"));
  for (const w of works) w.wait();
  const waits = hostSyncCounts().total - before, device = deviceWaits() - beforeDevice;
  say("result", {
    name: "allReduceStart x3",
    values: buckets.map((t) => values(t)[999]!),
    hostWaitsBeforeRead: waits,
    deviceWaitsBeforeRead: device,
  });
  pg.barrier("end");
  closeTwice(pg);
} else if (scenario === "bad-argument") {
  // rank 0 calls a collective wrongly: its communicator is aborted once, and the peer fails
  const pg = NcclProcessGroup.open();
  const t0 = Date.now();
  const t = fromArray(new Float32Array(4).fill(1));
  if (rank === 0) {
    expectFailure(t0, () => pg.broadcast(dev(t), 7));
    expectFailure(t0, () => pg.allReduce(dev(t), "sum")); // after the abort: at once
  } else {
    expectFailure(t0, () => {
      pg.allReduce(dev(t), "sum");
      t.toArray(); // the host waits here; the watchdog ends the wait
    });
  }
  closeTwice(pg);
} else if (scenario === "peer-dies") {
  // the last rank exits before its collective: every other rank fails within its timeout
  const pg = NcclProcessGroup.open();
  const t = fromArray(new Float32Array(256).fill(rank));
  pg.allReduce(dev(t), "sum");
  values(t);
  say("warm");
  if (rank === size - 1) Deno.exit(3);
  const t0 = Date.now();
  expectFailure(t0, () => {
    pg.allReduce(dev(t), "sum"); // queued: returns at once
    values(t); // blocked until the watchdog aborts
  });
  closeTwice(pg);
} else if (scenario === "stalled-peer") {
  // the last rank never calls the collective: the others' watchdogs abort at the deadline
  const pg = NcclProcessGroup.open({ timeoutMs: Number(Deno.args[1] ?? 3000) });
  const t = fromArray(new Float32Array(16).fill(1));
  const t0 = Date.now();
  if (rank === size - 1) {
    await new Promise((r) => setTimeout(r, Number(Deno.args[2] ?? 8000)));
    expectFailure(t0, () => {
      pg.allReduce(dev(t), "sum");
      values(t);
    });
  } else {
    expectFailure(t0, () => {
      pg.allReduce(dev(t), "sum");
      values(t);
    });
  }
  closeTwice(pg);
} else if (scenario === "init-timeout") {
  // only some ranks start: the start gives up at the timeout and aborts what it made
  const t0 = Date.now();
  expectFailure(t0, () => NcclProcessGroup.open({ timeoutMs: Number(Deno.args[1] ?? 3000) }));
  say("closed", { live: live() });
} else if (scenario === "no-close") {
  // a script that never closes its group: the watchdog must not keep the process alive
  const pg = NcclProcessGroup.open();
  const t = fromArray(Float32Array.of(rank));
  pg.allReduce(dev(t), "sum");
  say("result", { name: "sum", values: values(t) });
} else {
  throw new Error(`unknown scenario ${scenario}`);
}
