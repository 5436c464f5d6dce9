/**
 * NCCL's call surface (ffi/nccl.ts): checked calls throw DtNativeError with
 * the call's name and NCCL's text; nonblocking calls answer "done" or
 * "in-progress" and throw on anything else; teardown calls and
 * pollAsyncError never throw. First over planted NCCL functions (each
 * answer chosen by the test), then over the emulated device's stand-in
 * (kernels/nccl_emu), whose errors carry its ncclGetErrorString.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { BUILD_DIR, buildNative } from "../../scripts/build_native.ts";
import {
  bindNcclCalls,
  NCCL_IN_PROGRESS,
  NCCL_SUCCESS,
  type NcclFunctions,
  ncclLibrary,
} from "../../ffi/nccl.ts";
import { DtNativeError } from "../../ffi/native.ts";
import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do

/** ncclRemoteError and ncclInvalidArgument, as NCCL numbers them. */
const REMOTE_ERROR = 6;
const INVALID_ARGUMENT = 4;

/** C strings the planted functions hand out (kept alive for the test's length). */
const texts = new Map<string, Uint8Array<ArrayBuffer>>();
function cText(s: string): Deno.PointerValue {
  if (!texts.has(s)) texts.set(s, new TextEncoder().encode(`${s}\0`));
  return Deno.UnsafePointer.of(texts.get(s)!);
}

/**
 * Planted NCCL functions: each collective answers `answer`; the
 * asynchronous-error query answers `query` with the state `state`.
 */
function planted(o: {
  answer?: number;
  query?: number;
  state?: number;
  withFinalize?: boolean;
  withLastError?: boolean;
}) {
  const calls: string[] = [];
  const collective = (name: string) => () => (calls.push(name), o.answer ?? NCCL_SUCCESS);
  const fns = {
    ncclGetErrorString: (r: number) => cText(`planted text of result ${r}`),
    ncclGetLastError: o.withLastError === false ? null : () => cText("the peer at rank 3 exited"),
    ncclGetUniqueId: collective("ncclGetUniqueId"),
    ncclCommInitRankConfig: (out: BigUint64Array) => {
      out[0] = 0x1000n;
      return o.answer ?? NCCL_SUCCESS;
    },
    ncclAllReduce: collective("ncclAllReduce"),
    ncclBroadcast: collective("ncclBroadcast"),
    ncclAllGather: collective("ncclAllGather"),
    ncclReduceScatter: collective("ncclReduceScatter"),
    ncclCommGetAsyncError: (_c: unknown, state: Int32Array) => {
      state[0] = o.state ?? NCCL_SUCCESS;
      return o.query ?? NCCL_SUCCESS;
    },
    ncclCommAbort: collective("ncclCommAbort"),
    ncclCommDestroy: collective("ncclCommDestroy"),
    ncclCommFinalize: o.withFinalize === false ? null : collective("ncclCommFinalize"),
  };
  return {
    nccl: bindNcclCalls(fns as unknown as NcclFunctions, "/planted/libnccl.so.2", "2.99.0"),
    calls,
  };
}

const comm = Deno.UnsafePointer.create(0x1000n)!;

/** Whether `e` is NCCL's DtNativeError for `symbol` and `status`, its text matching `text`. */
function ncclError(symbol: string, status: number, text: RegExp) {
  return (e: unknown) => {
    assert.ok(e instanceof DtNativeError, `a DtNativeError, got ${e}`);
    assert.equal(e.library, "nccl");
    assert.equal(e.symbol, symbol);
    assert.equal(e.status, status);
    assert.match(e.text, text);
    assert.match(e.message, new RegExp(`^${symbol} failed \\(nccl, status ${status}\\): `));
    return true;
  };
}

Deno.test("nonblocking calls answer done or in-progress, and throw NCCL's text on a failure", () => {
  assert.equal(planted({}).nccl.ncclAllReduce(null, null, 4n, 7, 0, comm, null), "done");
  assert.equal(
    planted({ answer: NCCL_IN_PROGRESS }).nccl.ncclBroadcast(null, null, 4n, 7, 0, comm, null),
    "in-progress",
  );
  const { nccl } = planted({ answer: REMOTE_ERROR });
  assert.throws(
    () => nccl.ncclAllGather(null, null, 4n, 7, comm, null),
    ncclError(
      "ncclAllGather",
      REMOTE_ERROR,
      /^planted text of result 6 \(the peer at rank 3 exited\)$/,
    ),
  );
  assert.throws(
    () => nccl.ncclReduceScatter(null, null, 4n, 7, 0, comm, null),
    ncclError("ncclReduceScatter", REMOTE_ERROR, /result 6/),
  );
  assert.throws(
    () =>
      nccl.ncclCommInitRankConfig(
        new BigUint64Array(1),
        2,
        new Uint8Array(128),
        0,
        new Uint8Array(24),
      ),
    ncclError("ncclCommInitRankConfig", REMOTE_ERROR, /result 6 \(the peer at rank 3 exited\)/),
  );
  // without ncclGetLastError (NCCL < 2.13) the text is NCCL's string alone
  assert.throws(
    () =>
      planted({ answer: REMOTE_ERROR, withLastError: false }).nccl.ncclAllReduce(
        null,
        null,
        4n,
        7,
        0,
        comm,
        null,
      ),
    ncclError("ncclAllReduce", REMOTE_ERROR, /^planted text of result 6$/),
  );
});

Deno.test("asyncProgress() names the call it polls for, whether the communicator or the query failed", () => {
  assert.equal(
    planted({ state: NCCL_IN_PROGRESS }).nccl.asyncProgress(comm, "ncclAllReduce"),
    "in-progress",
  );
  assert.equal(planted({}).nccl.asyncProgress(comm, "ncclAllReduce"), "done");
  assert.throws(
    () => planted({ state: REMOTE_ERROR }).nccl.asyncProgress(comm, "ncclCommInitRankConfig"),
    ncclError("ncclCommInitRankConfig", REMOTE_ERROR, /result 6/),
  );
  assert.throws(
    () =>
      planted({ query: INVALID_ARGUMENT, state: NCCL_IN_PROGRESS }).nccl.asyncProgress(
        comm,
        "ncclBroadcast",
      ),
    ncclError("ncclBroadcast", INVALID_ARGUMENT, /result 4/),
  );
});

Deno.test("checked calls throw only when NCCL fails; ncclCommGetAsyncError hands the state back", () => {
  planted({}).nccl.ncclGetUniqueId(new Uint8Array(128));
  assert.throws(
    () => planted({ answer: INVALID_ARGUMENT }).nccl.ncclGetUniqueId(new Uint8Array(128)),
    ncclError("ncclGetUniqueId", INVALID_ARGUMENT, /^planted text of result 4$/),
  );
  // the communicator's error is an answer to act on (the caller words it), not the query's failure
  assert.equal(planted({ state: REMOTE_ERROR }).nccl.ncclCommGetAsyncError(comm), REMOTE_ERROR);
  assert.equal(
    planted({ state: NCCL_IN_PROGRESS }).nccl.ncclCommGetAsyncError(comm),
    NCCL_IN_PROGRESS,
  );
  assert.throws(
    () => planted({ query: INVALID_ARGUMENT }).nccl.ncclCommGetAsyncError(comm),
    ncclError("ncclCommGetAsyncError", INVALID_ARGUMENT, /result 4/),
  );
});

Deno.test("teardown calls and pollAsyncError never throw: they answer NCCL's result", () => {
  const failing = planted({ answer: REMOTE_ERROR, query: INVALID_ARGUMENT });
  assert.equal(failing.nccl.abort(comm), REMOTE_ERROR);
  assert.equal(failing.nccl.destroy(comm), REMOTE_ERROR);
  assert.equal(failing.nccl.finalize(comm), REMOTE_ERROR);
  assert.deepEqual(failing.calls, ["ncclCommAbort", "ncclCommDestroy", "ncclCommFinalize"]);
  // the query's own failure comes first, else the communicator's state
  assert.equal(failing.nccl.pollAsyncError(comm), INVALID_ARGUMENT);
  assert.equal(planted({ state: NCCL_IN_PROGRESS }).nccl.pollAsyncError(comm), NCCL_IN_PROGRESS);
  assert.equal(planted({ answer: NCCL_IN_PROGRESS }).nccl.abort(comm), NCCL_IN_PROGRESS);
  // an NCCL without ncclCommFinalize (< 2.14) says so instead of calling nothing silently
  assert.equal(planted({ withFinalize: false }).nccl.finalize(comm), null);
});

Deno.test({
  name:
    "the emulated device's NCCL stand-in through the call surface: its own string in each error",
  ignore: !HAVE_EMU,
  fn() {
    buildNative({ quiet: true });
    const lib = ncclLibrary(undefined, join(BUILD_DIR, "libdtrain_nccl_emu.so"));
    const nccl = lib.calls;
    assert.equal(nccl.path, lib.path);
    assert.match(nccl.version, /^\d+\.\d+\.\d+$/);
    const id = new Uint8Array(128);
    nccl.ncclGetUniqueId(id);
    assert.ok(id.some((b) => b !== 0), "the unique id was written");
    const none = null as unknown as Deno.PointerObject;
    assert.throws(
      () => nccl.ncclCommGetAsyncError(none),
      ncclError("ncclCommGetAsyncError", INVALID_ARGUMENT, /^invalid argument/),
    );
    assert.throws(
      () => nccl.ncclCommInitRankConfig(new BigUint64Array(1), 1, id, 0, new Uint8Array(24)),
      ncclError("ncclCommInitRankConfig", INVALID_ARGUMENT, /^invalid argument/),
    );
    assert.equal(nccl.pollAsyncError(none), INVALID_ARGUMENT);
    assert.equal(nccl.destroy(none), INVALID_ARGUMENT);
    assert.equal(nccl.abort(none), NCCL_SUCCESS); // as NCCL: aborting nothing is fine
  },
});
