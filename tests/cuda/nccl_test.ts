/**
 * The NCCL process group's parts that run without a GPU: the library search
 * failing clearly, the wait loop that stands in for NCCL's missing timeout
 * (completion, an asynchronous NCCL error, the deadline — each abort exactly
 * once), the dtype and op codes, and open() refusing on a machine without a
 * usable GPU.
 */
import assert from "node:assert/strict";
import { NCCL_DTYPE, NCCL_IN_PROGRESS, NCCL_OP, ncclLibrary } from "../../ffi/nccl.ts";
import { DTYPE_BYTES } from "../../distributed/backends/collective_buffer.ts";
import {
  type CompletionProbe,
  NcclProcessGroup,
  waitForCollective,
} from "../../distributed/backends/nccl_backend.ts";
import { cudaAvailability } from "../../ffi/cuda_discovery.ts";

/** A probe whose event fires after `doneAfter` polls, whose NCCL reports `errorAt` from that poll, on a fake clock. */
function fakeProbe(
  o: { doneAfter?: number; errorAt?: number; error?: number; msPerPoll?: number },
) {
  let polls = 0, clock = 0, aborts = 0;
  const probe: CompletionProbe = {
    done: () => polls >= (o.doneAfter ?? Infinity),
    asyncError:
      () => (o.errorAt !== undefined && polls >= o.errorAt ? o.error ?? 6 : NCCL_IN_PROGRESS),
    errorText: (r) => `remote process exited or there was a network error (code ${r})`,
    abort: () => void aborts++,
    now: () => clock,
    pause: () => {
      polls++;
      clock += o.msPerPoll ?? 1;
    },
  };
  return { probe, aborts: () => aborts, polls: () => polls };
}

Deno.test("waitForCollective() returns when the event fires, without aborting", () => {
  const f = fakeProbe({ doneAfter: 5 });
  waitForCollective(f.probe, "allReduce #1 (64 bytes) on rank 0 of 2", 1000, 1000);
  assert.equal(f.polls(), 5);
  assert.equal(f.aborts(), 0);
});

Deno.test("waitForCollective() aborts the communicator once and names the call on an NCCL error", () => {
  const f = fakeProbe({ errorAt: 3, error: 6 });
  assert.throws(
    () => waitForCollective(f.probe, "allReduce #7 (4096 bytes) on rank 1 of 2", 1000, 1000),
    /^Error: allReduce #7 \(4096 bytes\) on rank 1 of 2 failed: NCCL reported "remote process exited .*\(code 6\)" \(6\); the communicator was aborted$/,
  );
  assert.equal(f.aborts(), 1);
});

Deno.test("waitForCollective() aborts the communicator at the deadline instead of hanging", () => {
  const f = fakeProbe({ msPerPoll: 10 });
  assert.throws(
    () => waitForCollective(f.probe, "barrier #2 (0 bytes) on rank 0 of 4", 50, 50),
    /^Error: barrier #2 \(0 bytes\) on rank 0 of 4 timed out after 50 ms \(DTRAIN_TIMEOUT\): some rank did not reach it/,
  );
  assert.equal(f.aborts(), 1);
  assert.equal(f.polls(), 6);
});

Deno.test("every collective dtype and reduce op has its own NCCL code", () => {
  const dtypes = Object.keys(DTYPE_BYTES) as (keyof typeof DTYPE_BYTES)[];
  assert.deepEqual(Object.keys(NCCL_DTYPE).sort(), [...dtypes].sort());
  assert.equal(new Set(Object.values(NCCL_DTYPE)).size, dtypes.length);
  assert.deepEqual(Object.keys(NCCL_OP).sort(), ["avg", "max", "min", "sum"]);
  assert.equal(new Set(Object.values(NCCL_OP)).size, 4);
});

Deno.test("ncclLibrary() without NCCL names the folders it searched and how to install it", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-no-nccl-" });
  try {
    assert.throws(
      () =>
        ncclLibrary({
          env: (n) => ({ LD_LIBRARY_PATH: dir })[n],
          systemDirs: [],
          pythonPrefixes: [],
        }),
      new RegExp(
        `^Error: Cannot use NCCL for a process group of GPU ranks: libnccl\\.so\\.2 \\(or libnccl\\.so\\) not found; ` +
          `looked in ${dir}\\. Install NCCL`,
      ),
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test({
  name: "NcclProcessGroup.open() on a machine without a usable GPU throws what is missing",
  ignore: cudaAvailability().ok,
  fn() {
    assert.throws(
      () => NcclProcessGroup.open({ timeoutMs: 1000 }),
      /^Error: Cannot use device "cuda": /,
    );
  },
});
