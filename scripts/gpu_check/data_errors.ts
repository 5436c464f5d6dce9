/**
 * Errors in the data (an index outside its range, a value an integer cast
 * cannot hold) on both libraries: the CPU library returns DT_ERR_ARG from the
 * call; a device library may instead find it on the device and return it from
 * the next dt_deferred_error. Either way the status and the text must be the
 * CPU's, the first error of a step must be the one reported, and a report
 * must clear it.
 */
import type { KernelSymbols } from "../../ffi/symbols.ts";
import { cString, type NativeLibrary } from "../../ffi/native.ts";
import type { Arr, Kernels } from "./_harness.ts";

type Call = (k: Kernels, p: (a: Arr) => Deno.PointerValue, s: Deno.PointerValue) => number;

const DT = { F32: 0, I32: 3, I64: 4 } as const;

/** One call with bad data, made the same way on both libraries. */
export const DATA_ERROR_CASES: [label: string, call: Call][] = (() => {
  const idx = new Int32Array([0, 5, 99, 7, 120]);
  const table = new Float32Array(50 * 3), dout = new Float32Array(5 * 3);
  const out = new Float32Array(5 * 3), loss = new Float32Array(1), probs = new Float32Array(5 * 50);
  const logits = Float32Array.from({ length: 5 * 50 }, (_, i) => Math.sin(i));
  const neg = new Int32Array([2, -3, 1]), rows = new Uint8Array(3 * 8), dst = new Uint8Array(3 * 8);
  // (outer 2, D 3, J 4, inner 1) gathers and their backwards; 4x4 planes of max pooling
  const inp = new Float32Array(2 * 3),
    picked = new Float32Array(2 * 4),
    grad = new Float32Array(2 * 3);
  const perElem = new Int32Array([0, 2, 1, 1, 2, 3, 0, 1]), perJ = new Int32Array([1, 0, -2, 4]);
  const pooled = new Float32Array(2 * 4), plane = new Float32Array(2 * 16);
  const poolIdx = new Int32Array([0, 5, 99, 10, -1, 3, 15, -7]);
  const poolGeom = new BigInt64Array([2n, 4n, 4n, 2n, 2n, 2n, 2n, 0n, 0n, 1n, 1n, 2n, 2n]);
  // batch norm of (2, 2, 3) whose element count (all-reduced) is 0 or 0.5
  const bx = Float32Array.from({ length: 12 }, (_, i) => i), bsq = new Float64Array(2);
  const bacc = new Float64Array([1, 2, 0]),
    bsums = new Float64Array(4),
    half = new Float64Array([0.5]);
  const bstat = new Float32Array([1, 1]);
  return [
    [
      "dt_embedding_fwd: index 99 >= V",
      (k, p, s) => k.dt_embedding_fwd(p(out), p(idx), p(table), 5n, 50n, 3n, s),
    ],
    [
      "dt_embedding_fwd with C = 0: index 99 >= V",
      (k, p, s) => k.dt_embedding_fwd(p(out), p(idx), p(table), 5n, 50n, 0n, s),
    ],
    [
      "dt_embedding_bwd: index 99 >= V",
      (k, p, s) => k.dt_embedding_bwd(p(table), p(dout), p(idx), 5n, 50n, 3n, s),
    ],
    [
      "dt_gather_rows: a negative index",
      (k, p, s) => k.dt_gather_rows(p(dst), p(rows), p(neg), 3n, 8n, s),
    ],
    [
      "dt_crossentropy_fwd: target 99 >= V",
      (k, p, s) => k.dt_crossentropy_fwd(p(loss), p(probs), p(logits), p(idx), 5n, 50n, -100n, s),
    ],
    [
      "dt_crossentropy_bwd: target 99 >= V",
      (k, p, s) =>
        k.dt_crossentropy_bwd(
          p(probs),
          p(logits),
          p(idx),
          p(new Float32Array([1])),
          5n,
          50n,
          7n,
          s,
        ),
    ],
    [
      "dt_cast: f32 3e9 -> i32",
      (k, p, s) =>
        k.dt_cast(p(new Int32Array(3)), DT.I32, p(new Float32Array([1, 3e9, 2])), DT.F32, 3n, s),
    ],
    [
      "dt_cast: i64 -> i32 out of range",
      (k, p, s) =>
        k.dt_cast(
          p(new Int32Array(3)),
          DT.I32,
          p(new BigInt64Array([1n, 2n, -(1n << 40n)])),
          DT.I64,
          3n,
          s,
        ),
    ],
    [
      "dt_gather_dim: index 3 >= D",
      (k, p, s) => k.dt_gather_dim(p(picked), p(inp), p(perElem), 2n, 3n, 4n, 1n, 4n, s),
    ],
    [
      "dt_index_select: a negative index",
      (k, p, s) => k.dt_index_select(p(picked), p(inp), p(perJ), 2n, 3n, 4n, 1n, 4n, s),
    ],
    [
      "dt_scatter_add_dim: index 3 >= D",
      (k, p, s) => k.dt_scatter_add_dim(p(grad), p(picked), p(perElem), 2n, 3n, 4n, 1n, s),
    ],
    [
      "dt_index_add: a negative index",
      (k, p, s) => k.dt_index_add(p(grad), p(picked), p(perJ), 2n, 3n, 4n, 1n, s),
    ],
    [
      "dt_maxpool2d_bwd: a saved index past the plane",
      (k, p, s) => k.dt_maxpool2d_bwd(p(plane), p(pooled), p(poolIdx), poolGeom, s),
    ],
    [
      "dt_bn_sqdev: element count 0",
      (k, p, s) => k.dt_bn_sqdev(p(bsq), p(bx), p(bacc), 2n, 2n, 3n, s),
    ],
    [
      "dt_bn_finalize: element count 0",
      (k, p, s) =>
        k.dt_bn_finalize(p(bstat), p(bstat), null, null, null, p(bacc), p(bsq), 2n, 1e-5, 0.1, s),
    ],
    [
      "dt_bn_bwd_apply: element count 0.5",
      (k, p, s) =>
        k.dt_bn_bwd_apply(
          p(bx),
          p(bx),
          p(bx),
          p(bstat),
          p(bstat),
          null,
          p(bsums),
          p(half),
          2n,
          2n,
          3n,
          s,
        ),
    ],
  ];
})();

/** Device copies of every array a call touches (freed by the returned function). */
function onDevice(gpu: NativeLibrary<KernelSymbols>, stream: Deno.PointerValue) {
  const k = gpu.symbols;
  const ptrs: Deno.PointerObject[] = [];
  const p = (x: Arr) => {
    const d = k.dt_alloc(BigInt(x.byteLength))!;
    ptrs.push(d);
    gpu.check(
      k.dt_memcpy(d, Deno.UnsafePointer.of(x), BigInt(x.byteLength), 1, stream),
      "dt_memcpy",
    );
    return d;
  };
  return { p, free: () => ptrs.forEach((d) => k.dt_free(d)) };
}

/** The status and text of a call with bad data: from the call, or from the next dt_deferred_error. */
function refusal(
  lib: NativeLibrary<KernelSymbols>,
  call: Call,
  p: (a: Arr) => Deno.PointerValue,
  s: Deno.PointerValue,
) {
  const k = lib.symbols;
  const st = call(k, p, s);
  if (st !== 0) return { st, text: cString(k.dt_last_error()), deferred: false };
  const later = k.dt_deferred_error(s);
  return { st: later, text: cString(k.dt_last_error()), deferred: true };
}

/**
 * Problems found (empty when none): each case refused with the CPU's status
 * and text; then, with two bad calls in a row, the first is reported and
 * the report clears it.
 */
export function checkDataErrors(
  cpu: NativeLibrary<KernelSymbols>,
  gpu: NativeLibrary<KernelSymbols>,
  stream: Deno.PointerValue,
): string[] {
  const problems: string[] = [];
  const host = (x: Arr) => Deno.UnsafePointer.of(x);
  for (const [label, call] of DATA_ERROR_CASES) {
    const want = refusal(cpu, call, host, null);
    const dev = onDevice(gpu, stream);
    try {
      const got = refusal(gpu, call, dev.p, stream);
      if (want.st !== 1 || got.st !== want.st || got.text !== want.text) {
        problems.push(`${label}: CPU ${want.st} "${want.text}", device ${got.st} "${got.text}"`);
      }
    } finally {
      dev.free();
    }
  }
  // the first of two errors wins, and a report clears it
  const dev = onDevice(gpu, stream);
  try {
    const k = gpu.symbols;
    const [, first] = DATA_ERROR_CASES[0]!, [, second] = DATA_ERROR_CASES[6]!;
    const want = refusal(cpu, first, host, null).text;
    const a = first(k, dev.p, stream);
    const firstText = a !== 0 ? cString(k.dt_last_error()) : null;
    const b = second(k, dev.p, stream);
    if (a === 0 && b === 0) {
      const st = k.dt_deferred_error(stream);
      const text = cString(k.dt_last_error());
      if (st !== 1 || text !== want) {
        problems.push(`two errors: reported ${st} "${text}", want "${want}"`);
      }
      if (k.dt_deferred_error(stream) !== 0) problems.push("a reported error was reported again");
    } else if (firstText !== want) {
      problems.push(`two errors: the first call said "${firstText}", want "${want}"`);
    }
  } finally {
    dev.free();
  }
  if (gpu.symbols.dt_deferred_error(stream) !== 0) {
    problems.push("an error was left after the checks");
  }
  return problems;
}
