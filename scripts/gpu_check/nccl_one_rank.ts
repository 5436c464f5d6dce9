/**
 * gpu-check step 4a: the NCCL process group in a world of one GPU rank, end
 * to end: the communicator starts (the unique id passed by value), every
 * collective runs on the communication stream on device memory and on host
 * arrays (staged), allReduceStart overlaps a kernel on the compute stream, a
 * bad call aborts the group, and close() releases it. Exits 1 on a failure.
 *
 *   deno run -A scripts/gpu_check/nccl_one_rank.ts
 */
import { NcclProcessGroup } from "../../distributed/nccl_backend.ts";
import { cString } from "../../ffi/native.ts";
import { openCudaBackend } from "../../tensor/cuda_backend.ts";

const b = openCudaBackend();
const k = b.lib.symbols;
const call = b.call;
const results: [string, boolean, string][] = [];
function check(name: string, fn: () => string | void): void {
  try {
    results.push([name, true, fn() ?? ""]);
  } catch (e) {
    results.push([name, false, (e as Error).message]);
  }
}

/** Device copy of a Float32Array. */
function toDevice(a: Float32Array): Deno.PointerObject {
  const p = k.dt_alloc(BigInt(a.byteLength));
  if (!p) throw new Error(`dt_alloc: ${cString(k.dt_last_error())}`);
  call.dt_memcpy(p, Deno.UnsafePointer.of(a), BigInt(a.byteLength), 1);
  return p;
}

function fromDevice(p: Deno.PointerObject, n: number): Float32Array {
  const out = new Float32Array(n);
  call.dt_memcpy(Deno.UnsafePointer.of(out), p, BigInt(n * 4), 2);
  return out;
}

function same(a: Float32Array, e: Float32Array, what: string): void {
  for (let i = 0; i < e.length; i++) {
    if (!Object.is(a[i], e[i])) {
      throw new Error(`${what}: element ${i} is ${a[i]}, expected ${e[i]}`);
    }
  }
}

const t0 = performance.now();
const pg = await NcclProcessGroup.open({ timeoutMs: 60_000 });
const startMs = performance.now() - t0;
const n = 1 << 20;
const x = Float32Array.from({ length: n }, (_, i) => (i % 1000) / 7);

check(
  "communicator start (unique id by value)",
  () => `NCCL ${pg.ncclVersion}, rank ${pg.rank} of ${pg.size}, ${startMs.toFixed(0)} ms`,
);
check("allReduce sum/avg/max/min on device memory", () => {
  const d = toDevice(x);
  try {
    for (const op of ["sum", "avg", "max", "min"] as const) {
      pg.allReduce({ ptr: d, count: n, dtype: "f32" }, op);
    }
    same(fromDevice(d, n), x, "allReduce of one rank");
  } finally {
    call.dt_free(d);
  }
});
check("allReduce on a host array (staged through the GPU)", () => {
  const h = x.slice();
  pg.allReduce(h, "sum");
  same(h, x, "host allReduce");
});
check("broadcast, allGather, reduceScatter, barrier", () => {
  const d = toDevice(x), o = toDevice(new Float32Array(n));
  try {
    pg.broadcast({ ptr: d, count: n, dtype: "f32" }, 0);
    pg.allGather({ ptr: o, count: n, dtype: "f32" }, { ptr: d, count: n, dtype: "f32" });
    same(fromDevice(o, n), x, "allGather");
    call.dt_fill(o, 0, BigInt(n), 0);
    pg.reduceScatter({ ptr: o, count: n, dtype: "f32" }, { ptr: d, count: n, dtype: "f32" }, "sum");
    same(fromDevice(o, n), x, "reduceScatter");
    pg.barrier("gpu-check");
  } finally {
    call.dt_free(d);
    call.dt_free(o);
  }
});
check("allReduceStart overlaps a compute-stream kernel, wait() orders them", () => {
  const d = toDevice(x), other = toDevice(x);
  try {
    const work = pg.allReduceStart({ ptr: d, count: n, dtype: "f32" }, "sum");
    call.dt_scale(other, other, BigInt(n), 2); // runs meanwhile
    work.wait();
    call.dt_axpy(other, d, BigInt(n), 1); // sees the reduced d
    same(
      fromDevice(other, n),
      Float32Array.from(x, (v) => Math.fround(Math.fround(2 * v) + v)),
      "after wait",
    );
  } finally {
    call.dt_free(d);
    call.dt_free(other);
  }
});
check("a bad call fails the group; later calls fail at once", () => {
  let first = "", second = "";
  try {
    pg.broadcast(new Float32Array(4), 3);
  } catch (e) {
    first = (e as Error).message;
  }
  try {
    pg.barrier("after failure");
  } catch (e) {
    second = (e as Error).message;
  }
  if (!/root 3 is not a rank/.test(first) || !/failed earlier/.test(second)) {
    throw new Error(`unexpected errors: "${first}" / "${second}"`);
  }
});
check("close() releases the communicator", () => pg.close());

let failed = 0;
for (const [name, ok, detail] of results) {
  if (!ok) failed++;
  console.log(`${name.padEnd(58)} ${ok ? "PASS" : "FAIL"}  ${detail}`);
}
console.log(`nccl_one_rank: ${results.length} checks, ${failed} failed`);
Deno.exit(failed ? 1 : 0);
