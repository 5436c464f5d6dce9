/**
 * The node's shared-memory group of the Gloo group's hierarchical allReduce
 * (distributed/backends/node_shm.ts): its calls go through ffi/shm.ts's checked
 * wrappers, and their DtNativeError names the job's ranks, not the node's.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { NodeShm } from "../../distributed/backends/node_shm.ts";
import { DtNativeError } from "../../ffi/native.ts";
import { DT_ERR_SYS } from "../../ffi/shm.ts";

buildNative({ quiet: true });

Deno.test("a failed call of the node's group throws DtNativeError naming the job's rank", () => {
  // One local rank, job rank 6: the library says "rank 0", the error must say "rank 6".
  const group = NodeShm.open({
    name: `/dtrain-nodeshm-test-${Deno.pid}`,
    localRank: 0,
    localSize: 1,
    firstRank: 6,
    chunkBytes: 1 << 16,
    spinUs: 0,
    detail: false,
    timeoutMs: 10_000,
  });
  try {
    group.abort(DT_ERR_SYS, "rank 6 stopped on purpose");
    const a = new Float32Array(4);
    const p = Deno.UnsafePointer.of(a);
    assert.throws(() => group.allGather(p, p, 4, "f32", 10_000), (e: unknown) => {
      assert.ok(e instanceof DtNativeError, String(e));
      assert.equal(e.symbol, "dt_shm_allgather");
      assert.equal(e.status, DT_ERR_SYS);
      assert.match(e.text, /earlier failure on rank 6: job rank 6 stopped on purpose/);
      assert.doesNotMatch(e.message, /\brank 0\b/);
      return true;
    });
  } finally {
    group.close();
  }
});
