/**
 * Symbols bound on first use (ffi/native.ts, ffi/calls.ts): opening a library binds no function,
 * a library that lacks a required symbol is still refused when it is opened, an absent optional
 * symbol reads as null, and a wrapper is made (and its symbol bound) only when first read, then
 * stays a plain property that can be replaced.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { checkedCalls, kernelCalls } from "../../ffi/calls.ts";
import { findLibrary, openLibrary } from "../../ffi/native.ts";
import { KERNEL_SYMBOLS } from "../../ffi/symbols.ts";

buildNative({ quiet: true });
const CPU = findLibrary("libdtrain_cpu.so");

/** True while `key` of `obj` is still the binding getter (nothing bound yet). */
const unbound = (obj: object, key: string) =>
  typeof Object.getOwnPropertyDescriptor(obj, key)?.get === "function";

Deno.test("opening a library binds only what is read; a bound symbol calls the library", () => {
  const lib = openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS, CPU);
  try {
    assert.ok(unbound(lib.symbols, "dt_scale"));
    assert.ok(unbound(lib.symbols, "dt_gemm"));
    const out = new Float32Array([1, 2, 3]);
    const p = Deno.UnsafePointer.of(out);
    assert.equal(lib.symbols.dt_scale(p, p, 3n, 2, null), 0);
    assert.deepEqual([...out], [2, 4, 6]);
    assert.ok(!unbound(lib.symbols, "dt_scale"));
    assert.ok(unbound(lib.symbols, "dt_gemm"));
    assert.equal(lib.symbols.dt_scale, lib.symbols.dt_scale); // bound once
  } finally {
    lib.close();
  }
});

Deno.test("a library without a required symbol is refused at open; an absent optional one is null", () => {
  assert.throws(
    () =>
      openLibrary("libdtrain_cpu.so", {
        ...KERNEL_SYMBOLS,
        dt_no_such_kernel: { parameters: [], result: "i32" },
      }, CPU),
    /Cannot load native library .*libdtrain_cpu\.so: .*dt_no_such_kernel/,
  );
  const lib = openLibrary("libdtrain_cpu.so", {
    dt_abi_version: KERNEL_SYMBOLS.dt_abi_version,
    dt_no_such_kernel: { parameters: [], result: "i32", optional: true },
  }, CPU);
  try {
    assert.equal(lib.symbols.dt_no_such_kernel, null);
  } finally {
    lib.close();
  }
});

Deno.test("call wrappers are made on first read, then are plain replaceable properties", () => {
  const lib = openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS, CPU);
  try {
    const call = kernelCalls(lib, null);
    assert.ok(unbound(call, "dt_scale") && unbound(lib.symbols, "dt_scale"));
    const out = new Float32Array([1, -2]);
    const p = Deno.UnsafePointer.of(out);
    call.dt_scale(p, p, 2n, 3);
    assert.deepEqual([...out], [3, -6]);
    assert.ok(!unbound(call, "dt_scale") && !unbound(lib.symbols, "dt_scale"));
    assert.equal(call.dt_scale, call.dt_scale);
    const original = call.dt_scale;
    let seen = 0;
    (call as { dt_scale: unknown }).dt_scale = () => seen++;
    call.dt_scale(p, p, 2n, 3);
    assert.equal(seen, 1);
    (call as { dt_scale: unknown }).dt_scale = original;
    // every name of the table is there, enumerable, as with the eager table
    const names = Object.keys(call);
    assert.ok(names.includes("dt_gemm") && names.includes("dt_set_num_threads"), names.join());
    const plain = checkedCalls(lib, KERNEL_SYMBOLS, ["dt_set_num_threads"]);
    assert.deepEqual(Object.keys(plain), ["dt_set_num_threads"]);
  } finally {
    lib.close();
  }
});
