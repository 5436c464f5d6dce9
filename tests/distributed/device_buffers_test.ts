/**
 * Every process group is safe with the other device's memory or refuses it
 * with a clear error: the shared-memory group refuses GPU memory before
 * touching a byte, the one-rank group copies GPU memory on the GPU and
 * refuses to copy between host and GPU memory, and NCCL is refused on a CPU
 * rank. Also: the allocator's cache is kept per device.
 */
import assert from "node:assert/strict";
import { requireHostBuffer, resolveBuffer } from "../../distributed/backends/collective_buffer.ts";
import { SingleProcessGroup } from "../../distributed/backends/single_backend.ts";
import { initProcessGroup } from "../../distributed/init_process_group.ts";
import { HAVE_EMU, lastJsonOf } from "../gpu/_emu.ts";

const fake = Deno.UnsafePointer.create(0x1000n)!; // never dereferenced: the checks come first

Deno.test("the shared-memory group's buffer check refuses GPU memory and says what to use", () => {
  requireHostBuffer(
    resolveBuffer(new Float32Array(4), "buf"),
    "buf",
    "shared-memory process group",
  );
  requireHostBuffer(resolveBuffer({ ptr: fake, count: 4, dtype: "f32" }, "buf"), "buf", "x");
  assert.throws(
    () =>
      requireHostBuffer(
        resolveBuffer({ ptr: fake, count: 4, dtype: "f32", device: "cuda" }, "allReduce buf"),
        "allReduce buf",
        "shared-memory process group",
      ),
    /^TypeError: allReduce buf is GPU memory, but the shared-memory process group reads and writes buffers on the host: GPU ranks reduce through NCCL/,
  );
  assert.throws(
    () => resolveBuffer({ ptr: fake, count: 4, dtype: "f32", device: "tpu" as "cuda" }, "b"),
    /b has device "tpu": expected "cpu" or "cuda"/,
  );
});

Deno.test("the one-rank group refuses to copy between host and GPU memory, before touching either", () => {
  const pg = new SingleProcessGroup(1000, "cpu");
  assert.throws(
    () => pg.allGather(new Float32Array(4), { ptr: fake, count: 4, dtype: "f32", device: "cuda" }),
    /^TypeError: allGather: out is host memory but inp is GPU memory; a world of one copies inp to out/,
  );
  assert.throws(
    () =>
      pg.reduceScatter({ ptr: fake, count: 4, dtype: "f32", device: "cuda" }, new Float32Array(4)),
    /reduceScatter: out is GPU memory but inp is host memory/,
  );
  // host memory is copied as before
  const out = new Float32Array(3);
  pg.allGather(out, Float32Array.of(1, 2, 3));
  assert.deepEqual([...out], [1, 2, 3]);
});

Deno.test('initProcessGroup({ backend: "nccl" }) on a CPU rank says NCCL needs the rank\'s GPU', () => {
  assert.throws(
    () => initProcessGroup({ backend: "nccl", env: {} }),
    /initProcessGroup\(\{ backend: "nccl" \}\): this rank computes on the CPU; NCCL needs its GPU/,
  );
  assert.throws(
    () => initProcessGroup({ backend: "mpi" as "shm", env: {} }),
    /backend "mpi" is not one of "nccl", "gloo", "shm", "single"/,
  );
});

Deno.test({
  name:
    "on the emulated GPU: one-rank copies on the GPU, the single group alone, a cache per device",
  ignore: !HAVE_EMU,
  async fn() {
    const out = await lastJsonOf("tests/distributed/scripts/single_device.ts");
    assert.equal(out.reusedCpuBlock, false, "a GPU tensor got a block from the CPU's cache");
    assert.deepEqual(out.devices, ["cuda", "cuda", "cuda"]);
    assert.equal(out.backend, "single");
    assert.deepEqual(out.allGather, [1, 2, 3]);
    assert.deepEqual(out.reduceScatter, [1, 2, 3]);
    assert.match(out.mixed, /out is host memory but inp is GPU memory/);
  },
});
