/**
 * The FFI call convention (ffi/calls.ts): every dt_status kernel has a
 * wrapper of fixed arity, the stream is appended, and a failure throws
 * DtNativeError naming the symbol, the library and its own text.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { checkedCalls, streamCalls } from "../../ffi/calls.ts";
import { cpuCalls, gatherRowsInBackground } from "../../ffi/cpu.ts";
import { DtNativeError, type NativeLibrary } from "../../ffi/native.ts";
import {
  KERNEL_STREAMED,
  KERNEL_SYMBOLS,
  KERNEL_UNSTREAMED,
  KERNEL_VALUE_SYMBOLS,
} from "../../ffi/symbols.ts";
import { backend } from "../../tensor/backend.ts";

buildNative({ quiet: true });

Deno.test("kernelCalls() wraps every dt_status symbol with the symbol's arity less the stream", () => {
  const call = backend().call as unknown as Record<string, (...a: unknown[]) => void>;
  const names = Object.keys(KERNEL_SYMBOLS).filter((n) =>
    !(KERNEL_VALUE_SYMBOLS as readonly string[]).includes(n)
  );
  assert.deepEqual(Object.keys(call).sort(), names.sort());
  for (const name of KERNEL_STREAMED) {
    assert.equal(call[name]!.length, KERNEL_SYMBOLS[name].parameters.length - 1, name);
  }
  for (const name of KERNEL_UNSTREAMED) {
    assert.equal(call[name]!.length, KERNEL_SYMBOLS[name].parameters.length, name);
  }
  // The streamed list is what the table says: a trailing pointer on each.
  for (const name of KERNEL_STREAMED) {
    assert.equal(KERNEL_SYMBOLS[name].parameters.at(-1), "pointer", name);
  }
});

/** A library whose symbols record their arguments and return a chosen status. */
function fakeLibrary(status: () => number) {
  const seen: unknown[][] = [];
  const table = {
    two: { parameters: ["i32", "pointer"], result: "i32" },
    three: { parameters: ["pointer", "i64", "pointer"], result: "i32" },
    slow: { parameters: ["pointer"], result: "i32", nonblocking: true },
    plain: { parameters: ["i32", "i32"], result: "i32" },
  } as const satisfies Deno.ForeignLibraryInterface;
  const fn = (...a: unknown[]) => {
    seen.push(a);
    return status();
  };
  const lib = {
    path: "/fake/libfake.so",
    symbols: { two: fn, three: fn, slow: fn, plain: fn },
    fail(symbol: string, st: number): never {
      throw new DtNativeError("libfake.so", symbol, st, "fake text");
    },
    check() {},
    close() {},
  } as unknown as NativeLibrary<typeof table>;
  return { lib, table, seen };
}

Deno.test("streamCalls() appends the stream; checkedCalls() passes arguments unchanged", () => {
  const stream = Deno.UnsafePointer.create(0x1234n);
  const { lib, table, seen } = fakeLibrary(() => 0);
  const s = streamCalls(lib, table, ["two", "three"], stream);
  s.two(7);
  s.three(null, 5n);
  const c = checkedCalls(lib, table, ["plain"]);
  c.plain(1, 2);
  assert.deepEqual(seen, [[7, stream], [null, 5n, stream], [1, 2]]);
});

Deno.test("a non-zero status throws DtNativeError naming symbol, library, status and text", () => {
  const { lib, table } = fakeLibrary(() => 3);
  const s = streamCalls(lib, table, ["three"], null);
  assert.throws(() => s.three(null, 1n), (e: unknown) => {
    assert.ok(e instanceof DtNativeError);
    assert.equal(e.symbol, "three");
    assert.equal(e.library, "libfake.so");
    assert.equal(e.status, 3);
    assert.match(e.message, /^three failed \(libfake\.so, status 3\): fake text$/);
    return true;
  });
});

Deno.test("binding refuses a nonblocking symbol, a missing stream and an unknown name", () => {
  const { lib, table } = fakeLibrary(() => 0);
  assert.throws(() => streamCalls(lib, table, ["slow"], null), /slow is nonblocking/);
  assert.throws(
    () => streamCalls(lib, table, ["plain"], null),
    /plain does not end with a stream \(pointer\) parameter/,
  );
  assert.throws(
    // deno-lint-ignore no-explicit-any
    () => checkedCalls(lib, table, ["nope" as any]),
    /nope is not a function symbol/,
  );
});

Deno.test("a failing CPU kernel reports the library's own text", () => {
  const buf = new Float32Array(4), p = Deno.UnsafePointer.of(buf);
  assert.throws(
    () => cpuCalls().dt_scale(p, p, -1n, 2),
    (e: unknown) =>
      e instanceof DtNativeError && e.symbol === "dt_scale" && e.library === "libdtrain_cpu.so" &&
      /dt_scale: negative size/.test(e.message),
  );
});

Deno.test("gatherRowsInBackground() gathers rows and reports a failure without stale text", async () => {
  const table = new Float32Array([10, 11, 12, 13]);
  const idx = new Int32Array([3, 0, 2]);
  const out = new Float32Array(3);
  const P = Deno.UnsafePointer.of;
  await gatherRowsInBackground(P(out), P(table), P(idx), 3n, 4n);
  assert.deepEqual([...out], [13, 10, 12]);
  // Leave a different error on this thread first: the background failure must not report it.
  assert.throws(() => cpuCalls().dt_scale(P(out), P(out), -1n, 2));
  await assert.rejects(
    gatherRowsInBackground(P(out), P(table), P(idx), -1n, 4n),
    (e: unknown) =>
      e instanceof DtNativeError && e.symbol === "dt_gather_rows" && e.status !== 0 &&
      !/dt_scale/.test(e.message) && /background thread/.test(e.message),
  );
});

Deno.test("streamCalls() binds an optional symbol the library lacks to a call that throws naming it", () => {
  const table = {
    dt_missing: { parameters: ["pointer", "pointer"], result: "i32", optional: true },
  } as const satisfies Deno.ForeignLibraryInterface;
  const lib = {
    path: "/fake/libdtrain_cuda.so",
    symbols: { dt_missing: null },
    fail(): never {
      throw new Error("unreachable");
    },
    check() {},
    close() {},
  } as unknown as NativeLibrary<typeof table>;
  const call = streamCalls(lib, table, ["dt_missing"], null);
  assert.throws(
    () => (call.dt_missing as unknown as (p: null) => void)(null),
    (e: unknown) =>
      e instanceof DtNativeError && e.symbol === "dt_missing" &&
      /libdtrain_cuda\.so.*does not have the kernel yet/.test(e.message),
  );
});

Deno.test("every wrapper factory, 0 to 20 arguments, passes each argument in place (and the stream last)", () => {
  const stream = Deno.UnsafePointer.create(0x77n);
  for (let n = 0; n <= 20; n++) {
    const seen: unknown[][] = [];
    const params = Array.from({ length: n + 1 }, () => "pointer" as const);
    const table = { f: { parameters: params, result: "i32" } } as Deno.ForeignLibraryInterface;
    const plainTable = {
      f: { parameters: params.slice(1), result: "i32" },
    } as Deno.ForeignLibraryInterface;
    const lib = {
      symbols: { f: (...a: unknown[]) => (seen.push(a), 0) },
      fail(): never {
        throw new Error("unexpected failure");
      },
    } as unknown as NativeLibrary<typeof table>;
    const args = Array.from({ length: n }, (_, i) => i * 10);
    const s = streamCalls(lib, table, ["f"], stream).f as unknown as (...a: unknown[]) => void;
    assert.equal(s.length, n);
    s(...args);
    assert.deepEqual(seen.pop(), [...args, stream], `${n} arguments and the stream`);
    const p = checkedCalls(
      lib as unknown as NativeLibrary<typeof plainTable>,
      plainTable,
      ["f"],
    ).f as unknown as (...a: unknown[]) => void;
    assert.equal(p.length, n);
    p(...args);
    assert.deepEqual(seen.pop(), args, `${n} arguments`);
  }
});
