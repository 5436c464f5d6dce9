/**
 * The CUDA library's host side, without a GPU: every argument check that runs
 * before the GPU is touched fails with the CPU library's status and exact
 * text (in the nvcc build and in the emulated device's), and a call that
 * needs the GPU on a machine without a driver returns DT_ERR_CUDA carrying
 * the CUDA runtime's own error string and file:line.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { BUILD_DIR, buildNative, hasCommand } from "../../scripts/build_native.ts";
import { KERNEL_SYMBOLS, type KernelSymbols } from "../../ffi/symbols.ts";
import { CUDA_LIBRARY_NAME, CUDA_SYMBOLS } from "../../ffi/cuda.ts";
import { findCudaLibrary } from "../../ffi/cuda_libs.ts";
import { cString, type NativeLibrary, openLibrary } from "../../ffi/native.ts";

const HAVE_NVCC = hasCommand("nvcc") && Deno.env.get("DTRAIN_CUDA") !== "0";
import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do
buildNative({ quiet: true });

const F = new Float32Array(64);
const I = new Int32Array(64);
const D = new Float64Array(64);
const i64 = (a: number[]) => BigInt64Array.from(a, BigInt);
const G = i64(Array(17).fill(1));
const p = (a: Float32Array | Int32Array | Float64Array | BigInt64Array | BigUint64Array) =>
  Deno.UnsafePointer.of(a);
/** A host table of two tensors of 4 elements (F twice), as the dt_*_many calls take. */
const PTRS = BigUint64Array.of(
  BigInt(Deno.UnsafePointer.value(p(F))),
  BigInt(Deno.UnsafePointer.value(p(F))),
);
const COUNTS = BigInt64Array.of(4n, 4n);

/** A bad call, made the same way on both libraries. */
type BadCall = [label: string, call: (k: NativeLibrary<KernelSymbols>["symbols"]) => number];

const BAD_CALLS: BadCall[] = [
  ["dt_set_num_threads(0)", (k) => k.dt_set_num_threads(0)],
  ["dt_memcpy with a negative size", (k) => k.dt_memcpy(p(F), p(F), -1n, 1, null)],
  ["dt_memcpy with kind 7", (k) => k.dt_memcpy(p(F), p(F), 4n, 7, null)],
  ["dt_fill with an unknown dtype", (k) => k.dt_fill(p(F), 9, 4n, 1, null)],
  ["dt_fill of i32 with 1e20", (k) => k.dt_fill(p(I), 3, 4n, 1e20, null)],
  ["dt_cast from an unknown dtype", (k) => k.dt_cast(p(F), 0, p(F), 11, 4n, null)],
  ["dt_binary with op 7", (k) => k.dt_binary(7, p(F), p(F), p(F), 4n, 4n, 1n, null)],
  ["dt_binary with bn = 0", (k) => k.dt_binary(0, p(F), p(F), p(F), 4n, 0n, 1n, null)],
  ["dt_scale with n = -1", (k) => k.dt_scale(p(F), p(F), -1n, 2, null)],
  ["dt_axpy with null pointers", (k) => k.dt_axpy(null, null, 4n, 2, null)],
  ["dt_relu_fwd with n = -3", (k) => k.dt_relu_fwd(p(F), p(F), -3n, null)],
  ["dt_gelu_bwd with a null dout", (k) => k.dt_gelu_bwd(p(F), null, p(F), 4n, null)],
  ["dt_dropout_fwd with p = 2", (k) => k.dt_dropout_fwd(p(F), p(F), 4n, 2, 1n, 0n, null)],
  ["dt_reduce_bcast with inner = 0", (k) => k.dt_reduce_bcast(p(F), p(F), 4n, 2n, 0n, null)],
  ["dt_sumsq with a null out", (k) => k.dt_sumsq(null, p(F), 4n, null)],
  ["dt_argmax_rows with cols = 0", (k) => k.dt_argmax_rows(p(I), p(F), 2n, 0n, null)],
  ["dt_softmax_fwd with causal_t = -1", (k) => k.dt_softmax_fwd(p(F), p(F), 2n, 4n, -1n, 1, null)],
  ["dt_softmax_bwd with cols = 0", (k) => k.dt_softmax_bwd(p(F), p(F), p(F), 2n, 0n, 1, null)],
  [
    "dt_layernorm_fwd with eps = -1",
    (k) =>
      k.dt_layernorm_fwd(p(F), p(F), p(F), p(F), null, null, 2n, 4n, -1, 0, 0, null, 0, null, null),
  ],
  [
    "dt_layernorm_bwd with a null mean",
    (k) =>
      k.dt_layernorm_bwd(p(F), null, null, p(F), p(F), null, null, p(F), 2n, 4n, 0, 0, 0, 0, null),
  ],
  ["dt_embedding_fwd with V = -1", (k) => k.dt_embedding_fwd(p(F), p(I), p(F), 4n, -1n, 4n, null)],
  [
    "dt_embedding_bwd with 2^31 positions",
    (k) => k.dt_embedding_bwd(p(F), p(F), p(I), 1n << 31n, 4n, 1n, null),
  ],
  [
    "dt_crossentropy_fwd with V = 0",
    (k) => k.dt_crossentropy_fwd(p(F), p(F), p(F), p(F), 0, p(I), 2n, 0n, -100n, null),
  ],
  [
    "dt_crossentropy_fwd of i32 logits",
    (k) => k.dt_crossentropy_fwd(p(F), p(F), p(F), p(F), 3, p(I), 2n, 4n, -100n, null),
  ],
  [
    "dt_crossentropy_bwd with a null dloss",
    (k) => k.dt_crossentropy_bwd(p(F), p(F), p(F), p(F), p(I), null, 0, 2n, 4n, -100n, null),
  ],
  [
    "dt_slice_cols past the last column",
    (k) => k.dt_slice_cols(p(F), p(F), 2n, 4n, 3n, 2n, 4n, null),
  ],
  [
    "dt_scatter_cols with elem_bytes 0",
    (k) => k.dt_scatter_cols(p(F), p(F), 2n, 4n, 0n, 2n, 0n, null),
  ],
  [
    "dt_transpose_0213 with a negative dim",
    (k) => k.dt_transpose_0213(p(F), p(F), 1n, -2n, 3n, 1n, 4n, null),
  ],
  [
    "dt_attention_fwd with a head dimension of 257",
    (k) => k.dt_attention_fwd(p(F), p(F), p(F), 0, 1n, 2n, 1n, 257n, 1, 1, null),
  ],
  [
    "dt_attention_bwd with dqkv aliasing qkv",
    (k) => k.dt_attention_bwd(p(F), p(F), p(F), p(I), p(F), 1, 1n, 2n, 1n, 4n, 1, 1, null),
  ],
  ["dt_gather_rows with n = -1", (k) => k.dt_gather_rows(p(F), p(F), p(I), -1n, 4n, null)],
  ["dt_gemm with dtype 5", (k) => gemm(k, { dtype: 5 })],
  ["dt_gemm with transA = 2", (k) => gemm(k, { ta: 2 })],
  ["dt_gemm with lda too small", (k) => gemm(k, { lda: 2n })],
  // 2^62 elements fit in int64, 2^62 f32 bytes do not: both libraries count bytes
  ["dt_gemm whose A spans 2^64 bytes", (k) => gemm(k, { batch: 2n, sa: 1n << 61n })],
  ["dt_gemm with overlapping batches of C", (k) => gemm(k, { batch: 2n, sc: 3n })],
  ["dt_gemm with a null A", (k) => gemm(k, { a: null })],
  [
    "dt_gemm_ex with an f16 C of bf16 operands",
    (k) =>
      k.dt_gemm_ex(
        1,
        2,
        0,
        0,
        2n,
        2n,
        2n,
        1,
        p(F),
        2n,
        p(F),
        2n,
        0,
        p(F),
        2n,
        0,
        null,
        null,
        0n,
        null,
      ),
  ],
  [
    "dt_gemm_ex with a gelu epilogue and no aux",
    (k) =>
      k.dt_gemm_ex(
        0,
        0,
        0,
        0,
        2n,
        2n,
        2n,
        1,
        p(F),
        2n,
        p(F),
        2n,
        0,
        p(F),
        2n,
        2,
        p(F),
        null,
        2n,
        null,
      ),
  ],
  [
    "dt_adamw with step 0",
    (k) => k.dt_adamw(p(F), p(F), p(F), p(F), 4n, 1e-3, 0.9, 0.999, 1e-8, 0, 0n, null),
  ],
  [
    "dt_adamw with beta1 = 1",
    (k) => k.dt_adamw(p(F), p(F), p(F), p(F), 4n, 1e-3, 1, 0.999, 1e-8, 0, 1n, null),
  ],
  [
    "dt_sgd with nesterov and no momentum",
    (k) => k.dt_sgd(p(F), p(F), p(F), 4n, 0.1, 0, 0, 0, 1, 1, null),
  ],
  [
    "dt_adamw_many with a step of 0",
    (k) =>
      k.dt_adamw_many(
        p(PTRS),
        p(PTRS),
        p(PTRS),
        p(PTRS),
        p(COUNTS),
        p(BigInt64Array.of(1n, 0n)),
        p(Float64Array.of(1e-3, 0.9, 0.999, 1e-8, 0, 1e-3, 0.9, 0.999, 1e-8, 0)),
        2n,
        null,
      ),
  ],
  [
    "dt_sgd_many with nesterov and no momentum",
    (k) =>
      k.dt_sgd_many(
        p(PTRS),
        p(PTRS),
        p(PTRS),
        p(COUNTS),
        p(Float64Array.of(0.1, 0.9, 0, 0, 0.1, 0, 0, 0)),
        p(Int32Array.of(0, 1, 1, 1)),
        2n,
        null,
      ),
  ],
  [
    "dt_sgd_many with a null table",
    (k) => k.dt_sgd_many(null, null, null, null, null, null, 3n, null),
  ],
  ["dt_unscale_check with a null found_inf", (k) => k.dt_unscale_check(p(F), 4n, 0.5, null, null)],
  // the convolutional-network and everyday ops (kernels/common/ops_checks.h)
  ["dt_unary_fwd with op 7", (k) => k.dt_unary_fwd(7, p(F), p(F), 4n, 0, 0, null)],
  [
    "dt_unary_bwd with a null out",
    (k) => k.dt_unary_bwd(0, p(F), p(F), p(F), null, 4n, 0, 0, null),
  ],
  ["dt_where with a null cond", (k) => k.dt_where(p(F), null, p(F), p(F), 4n, 0, 0, null)],
  ["dt_strided_copy with 17 dims", (k) => k.dt_strided_copy(p(F), p(F), 17, G, G, G, 4n, null)],
  [
    "dt_strided_copy with a negative stride",
    (k) => k.dt_strided_copy(p(F), p(F), 1, i64([4]), i64([-1]), i64([1]), 4n, null),
  ],
  ["dt_reduce_dim with op 4", (k) => k.dt_reduce_dim(4, p(F), null, p(F), 1n, 4n, 1n, null)],
  ["dt_reduce_dim max over D = 0", (k) => k.dt_reduce_dim(2, p(F), null, p(F), 2n, 0n, 1n, null)],
  [
    "dt_softmax_dim_fwd with is_log 2",
    (k) => k.dt_softmax_dim_fwd(p(F), p(F), 2n, 4n, 1n, 2, null),
  ],
  [
    "dt_softmax_dim_bwd with a negative D",
    (k) => k.dt_softmax_dim_bwd(p(F), p(F), p(F), 2n, -4n, 1n, 0, null),
  ],
  [
    "dt_gather_dim with elem_bytes 65",
    (k) => k.dt_gather_dim(p(F), p(F), p(I), 1n, 3n, 4n, 1n, 65n, null),
  ],
  [
    "dt_index_select with a null idx",
    (k) => k.dt_index_select(p(F), p(F), null, 1n, 3n, 4n, 1n, 4n, null),
  ],
  [
    "dt_scatter_add_dim into an empty dimension",
    (k) => k.dt_scatter_add_dim(p(F), p(F), p(I), 2n, 0n, 3n, 1n, null),
  ],
  ["dt_index_add with a null dout", (k) => k.dt_index_add(p(F), null, p(I), 2n, 3n, 4n, 1n, null)],
  ["dt_im2col with a null geometry", (k) => k.dt_im2col(p(F), p(F), null, null)],
  ["dt_col2im with stride 0", (k) => k.dt_col2im(p(F), p(F), conv({ SH: 0 }), null)],
  [
    "dt_conv2d_direct_fwd with groups 3",
    (k) => k.dt_conv2d_direct_fwd(p(F), p(F), p(F), null, conv({}), 4n, 3n, null),
  ],
  [
    "dt_conv2d_direct_bwd_weight with 72 taps",
    (k) => k.dt_conv2d_direct_bwd_weight(p(F), null, p(F), p(F), conv({ C: 8 }), 4n, 1n, null),
  ],
  [
    "dt_conv2d_direct_bwd_input with a null weight",
    (k) => k.dt_conv2d_direct_bwd_input(p(F), p(F), null, conv({}), 4n, 1n, null),
  ],
  ["dt_maxpool2d_fwd with a null idx", (k) => k.dt_maxpool2d_fwd(p(F), null, p(F), pool({}), null)],
  [
    "dt_maxpool2d_bwd with kernel 0",
    (k) => k.dt_maxpool2d_bwd(p(F), p(F), p(I), pool({ KH: 0 }), null),
  ],
  [
    "dt_avgpool2d_fwd with dilation 2",
    (k) => k.dt_avgpool2d_fwd(p(F), p(F), pool({ DW: 2 }), 1, 0n, null),
  ],
  [
    "dt_avgpool2d_bwd with padding past half the kernel",
    (k) => k.dt_avgpool2d_bwd(p(F), p(F), pool({ PH: 2 }), 1, 0n, null),
  ],
  [
    "dt_adaptive_avgpool2d_fwd to an empty output",
    (k) => k.dt_adaptive_avgpool2d_fwd(p(F), p(F), 2n, 4n, 4n, 0n, 2n, null),
  ],
  [
    "dt_adaptive_avgpool2d_bwd with a null dout",
    (k) => k.dt_adaptive_avgpool2d_bwd(p(F), null, 2n, 4n, 4n, 2n, 2n, null),
  ],
  ["dt_bn_sum with N = -1", (k) => k.dt_bn_sum(p(D), p(F), -1n, 4n, 4n, null)],
  ["dt_bn_sqdev with a null acc", (k) => k.dt_bn_sqdev(p(D), p(F), null, 2n, 4n, 4n, null)],
  [
    "dt_bn_finalize with momentum 2",
    (k) => k.dt_bn_finalize(p(F), p(F), null, null, null, p(D), p(D), 4n, 1e-5, 2, null),
  ],
  [
    "dt_bn_eval_stats with eps -1",
    (k) => k.dt_bn_eval_stats(p(F), p(F), p(F), p(F), 4n, -1, null),
  ],
  [
    "dt_bn_apply with a null rstd",
    (k) => k.dt_bn_apply(p(F), p(F), p(F), null, null, null, 2n, 4n, 4n, null),
  ],
  [
    "dt_bn_bwd_reduce with HW overflowing",
    (k) => k.dt_bn_bwd_reduce(p(D), null, null, p(F), p(F), p(F), p(F), 2n, 4n, 1n << 62n, null),
  ],
  [
    "dt_bn_bwd_apply with sums but no count",
    (k) => k.dt_bn_bwd_apply(p(F), p(F), p(F), p(F), p(F), null, p(D), null, 2n, 4n, 4n, null),
  ],
  [
    "dt_bn_relu_maxpool2x2_fwd with a null mean",
    (k) =>
      k.dt_bn_relu_maxpool2x2_fwd(p(F), p(I), p(F), null, p(F), null, null, 1n, 2n, 4n, 4n, null),
  ],
  ["dt_winograd_weight with Cout = -1", (k) => k.dt_winograd_weight(p(F), p(F), -1n, 2n, null)],
  [
    "dt_winograd_weight_grad with a null m",
    (k) => k.dt_winograd_weight_grad(p(F), null, 2n, 2n, null),
  ],
  [
    "dt_winograd_input at stride 2",
    (k) => k.dt_winograd_input(p(F), p(F), conv({ SH: 2 }), 0n, 1n, 1n, null),
  ],
  [
    "dt_winograd_input_grad past the last tile",
    (k) => k.dt_winograd_input_grad(p(F), p(F), conv({}), 10n, 7n, 7n, null),
  ],
  [
    "dt_winograd_output with ld < nt",
    (k) => k.dt_winograd_output(p(F), p(F), null, conv({}), 4n, 0n, 4n, 3n, null),
  ],
  [
    "dt_winograd_output_grad with a 5x5 kernel",
    (k) => k.dt_winograd_output_grad(p(F), p(F), conv({ K: 5 }), 4n, 0n, 1n, 1n, null),
  ],
];

/** A 3x3 convolution of (1, C=4, 8, 8) with one field changed. */
function conv(o: Partial<Record<"C" | "SH" | "K", number>>): BigInt64Array<ArrayBuffer> {
  return i64([1, o.C ?? 4, 8, 8, o.K ?? 3, o.K ?? 3, o.SH ?? 1, 1, 1, 1, 1, 1, 8, 8]);
}

/** A 2x2 pooling of (2, 8, 8) planes with one field changed. */
function pool(o: Partial<Record<"KH" | "DW" | "PH", number>>): BigInt64Array<ArrayBuffer> {
  return i64([2, 8, 8, o.KH ?? 2, 2, 2, 2, o.PH ?? 0, 0, 1, o.DW ?? 1, 4, 4]);
}

/** dt_gemm of a 3x4 @ 4x5 product with one field changed. */
function gemm(
  k: NativeLibrary<KernelSymbols>["symbols"],
  o: {
    dtype?: number;
    ta?: number;
    lda?: bigint;
    batch?: bigint;
    sa?: bigint;
    sc?: bigint;
    a?: Deno.PointerValue;
  },
): number {
  const a = o.a === undefined ? p(F) : o.a;
  return k.dt_gemm(
    o.dtype ?? 0,
    o.ta ?? 0,
    0,
    3n,
    5n,
    4n,
    1,
    a,
    o.lda ?? 4n,
    p(F),
    5n,
    0,
    p(F),
    5n,
    o.batch ?? 1n,
    o.sa ?? 0n,
    0n,
    o.sc ?? 0n,
    null,
  );
}

/** Every BAD_CALL on the CPU library and on `name`: the same status and text. */
function assertSameRefusals(name: string): void {
  const cpu = openLibrary("libdtrain_cpu.so", KERNEL_SYMBOLS, join(BUILD_DIR, "libdtrain_cpu.so"));
  const gpu = openLibrary(name, CUDA_SYMBOLS, join(BUILD_DIR, name));
  try {
    for (const [label, call] of BAD_CALLS) {
      const cpuStatus = call(cpu.symbols), cpuText = cString(cpu.symbols.dt_last_error());
      const gpuStatus = call(gpu.symbols), gpuText = cString(gpu.symbols.dt_last_error());
      assert.equal(cpuStatus, 1, `${label}: the CPU library returned ${cpuStatus} (${cpuText})`);
      assert.equal(
        gpuStatus,
        cpuStatus,
        `${label}: CUDA status ${gpuStatus} (${gpuText}) != CPU ${cpuStatus}`,
      );
      assert.equal(gpuText, cpuText, `${label}: texts differ`);
    }
    assert.equal(gpu.symbols.dt_alloc(-1n), null);
    assert.equal(cString(gpu.symbols.dt_last_error()), "dt_alloc: negative size -1");
  } finally {
    cpu.close();
    gpu.close();
  }
}

Deno.test({
  name: "libdtrain_cuda.so rejects bad arguments with the CPU library's status and text",
  ignore: !HAVE_NVCC,
  fn: () => assertSameRefusals(CUDA_LIBRARY_NAME),
});

Deno.test({
  name: "libdtrain_cuda_emu.so rejects bad arguments with the CPU library's status and text",
  ignore: !HAVE_EMU,
  fn: () => assertSameRefusals("libdtrain_cuda_emu.so"),
});

Deno.test({
  name: "without a driver, GPU calls return DT_ERR_CUDA with the CUDA runtime's text and file:line",
  ignore: !HAVE_NVCC || findCudaLibrary("driver").path !== null,
  fn() {
    const gpu = openLibrary(CUDA_LIBRARY_NAME, CUDA_SYMBOLS, join(BUILD_DIR, CUDA_LIBRARY_NAME));
    try {
      const count = new Int32Array(1);
      assert.equal(gpu.symbols.dt_cuda_device_count(count), 3);
      assert.match(
        cString(gpu.symbols.dt_last_error()),
        /^cudaGetDeviceCount\(&n\) failed: cudaError\w+: .+ \(runtime\.cu:\d+\)$/,
      );
      // a kernel call picks the device first, and reports the same failure
      assert.equal(gpu.symbols.dt_scale(p(F), p(F), 4n, 2, null), 3);
      assert.match(
        cString(gpu.symbols.dt_last_error()),
        /^cudaGetDevice\(&dev\) failed: cudaError\w+: /,
      );
      assert.equal(gpu.symbols.dt_alloc(16n), null);
      assert.match(cString(gpu.symbols.dt_last_error()), /failed: cudaError\w+: /);
      assert.match(cString(gpu.symbols.dt_backend_name()), /^cuda \(no usable GPU: cudaGetDevice/);
    } finally {
      gpu.close();
    }
  },
});
