/**
 * Run by tests/distributed/device_buffers_test.ts in a process of its own (the
 * device is process-wide): on the emulated GPU, a one-rank group copies GPU
 * memory on the GPU, initProcessGroup() alone gives the single group, and the
 * allocator never hands a CPU block to a GPU tensor. Prints one JSON line.
 */
import { useDevice } from "../../../tensor/device_choice.ts";
import { fromArray, zeros } from "../../../tensor/tensor.ts";
import { initProcessGroup } from "../../../distributed/init_process_group.ts";
import { emptyCache } from "../../../tensor/allocator.ts";

const out: Record<string, unknown> = {};
// CPU tensors first, freed into the CPU's cache
const cpuPtrs = [1, 2, 3].map(() => {
  const t = zeros([64]);
  const p = Deno.UnsafePointer.value(t.ptr);
  t.dispose();
  return p;
});
useDevice("cuda-emu");
const gpu = [1, 2, 3].map(() => zeros([64])); // the same sizes: only the GPU's cache may serve them
out.reusedCpuBlock = gpu.some((t) => cpuPtrs.includes(Deno.UnsafePointer.value(t.ptr)));
out.devices = gpu.map((t) => t.device);
for (const t of gpu) t.dispose();
emptyCache(); // frees each block with its own library: the GPU's with cudaFree, the CPU's with free

const pg = initProcessGroup();
out.backend = pg.backend;
const inp = fromArray(Float32Array.of(1, 2, 3));
const o = zeros([3]);
const dev = (t: typeof inp) => ({
  ptr: t.ptr,
  count: t.numel,
  dtype: "f32" as const,
  device: "cuda" as const,
});
pg.allGather(dev(o), dev(inp));
out.allGather = [...(o.toArray() as Float32Array)];
const rs = zeros([3]);
pg.reduceScatter({ ptr: rs.ptr, count: 3, dtype: "f32" }, dev(inp)); // no device: the group's (GPU)
out.reduceScatter = [...(rs.toArray() as Float32Array)];
try {
  pg.allGather(new Float32Array(3), dev(inp));
  out.mixed = "no error";
} catch (e) {
  out.mixed = (e as Error).message;
}
pg.close();
console.log(JSON.stringify(out));
