/**
 * A failing native call's message always says why: a library's text with C's
 * "(null)" in it (printf of a NULL string) or no text at all is reported as
 * the library's bug, never passed on as "(null)" or a blank.
 */
import assert from "node:assert/strict";
import { DtNativeError, nativeErrorText } from "../../ffi/native.ts";

Deno.test("DtNativeError never shows C's (null): the missing part is named as the library's bug", () => {
  const e = new DtNativeError(
    "libdtrain_shm.so",
    "dt_shm_allreduce",
    8,
    "(null) on rank 0 cannot complete: rank 1 (pid 42) exited",
  );
  assert.doesNotMatch(e.message, /\(null\)/);
  assert.equal(
    e.message,
    "dt_shm_allreduce failed (libdtrain_shm.so, status 8): [libdtrain_shm.so gave no text for this part: " +
      "a bug in libdtrain_shm.so] on rank 0 cannot complete: rank 1 (pid 42) exited",
  );
});

Deno.test("DtNativeError of a status without text says so, with the status and the library", () => {
  for (const blank of ["", "  \n"]) {
    const e = new DtNativeError("libdtrain_cpu.so", "dt_gemm", 2, blank);
    assert.equal(
      e.message,
      "dt_gemm failed (libdtrain_cpu.so, status 2): no error text (libdtrain_cpu.so returned status 2 " +
        "without one: a bug in libdtrain_cpu.so)",
    );
  }
});

Deno.test("nativeErrorText() passes a library's real text through unchanged", () => {
  const text = "#2 allReduce(sum, 100000 x f32) on rank 0 cannot complete: rank 1 (pid 7) exited";
  assert.equal(nativeErrorText("libdtrain_shm.so", 8, text), text);
});

Deno.test("DtNativeError keeps the library's own text apart from the message", () => {
  const e = new DtNativeError("libdtrain_shm.so", "dt_shm_barrier", 7, "barrier 'x' timed out");
  assert.equal(e.text, "barrier 'x' timed out");
  assert.equal(
    e.message,
    "dt_shm_barrier failed (libdtrain_shm.so, status 7): barrier 'x' timed out",
  );
});
