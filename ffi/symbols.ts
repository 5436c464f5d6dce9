/**
 * The kernel ABI: every symbol that both native kernel libraries (CPU:
 * build/libdtrain_cpu.so from kernels/cpu, CUDA: build/libdtrain_cuda.so from
 * kernels/cuda) export, with the same signatures and semantics. The backend
 * chosen at run time is just which library was opened.
 *
 * Conventions, shared by every entry:
 * - returns a dt_status (i32): 0 is success; otherwise dt_last_error() holds
 *   the library's own text. Callers use the status-checked wrappers of
 *   ffi/calls.ts (`backend().call.dt_scale(...)`), never the raw symbols.
 * - sizes and counts are i64 and must be passed as BigInt (a JS number there
 *   drops the call to Deno's slow FFI path).
 * - the last parameter is a stream (CUDA) that the CPU library ignores, except
 *   for the symbols of KERNEL_UNSTREAMED; the wrappers append it.
 * - float tensors are f32 unless a dtype argument says otherwise; index
 *   tensors are i32.
 * - backward kernels overwrite their outputs (never accumulate), unless the
 *   comment says so; autograd accumulates with dt_axpy.
 * - errors in the data rather than the arguments (an index outside its range,
 *   a value an integer dt_cast cannot hold) are DT_ERR_ARG naming the op, the
 *   position and the value. The CPU library returns them from the call; the
 *   CUDA library finds them on the device without a read-back (the output is
 *   poisoned) and returns the first from the next dt_deferred_error, which a
 *   step calls once at its explicit synchronisation.
 *
 * @module
 */

import { RUNTIME_SYMBOLS } from "./kernel_abi/runtime.ts";
import { ELEMENTWISE_SYMBOLS } from "./kernel_abi/elementwise.ts";
import { ROW_SYMBOLS } from "./kernel_abi/rows.ts";
import { ATTENTION_SYMBOLS } from "./kernel_abi/attention.ts";
import { LAYOUT_SYMBOLS } from "./kernel_abi/layout.ts";
import { GEMM_SYMBOLS } from "./kernel_abi/gemm.ts";
import { TENSOR_OP_SYMBOLS } from "./kernel_abi/tensor_ops.ts";
import { CONV_SYMBOLS } from "./kernel_abi/conv.ts";
import { POOL_NORM_SYMBOLS } from "./kernel_abi/pool_norm.ts";
import { OPTIM_SYMBOLS } from "./kernel_abi/optim.ts";
import { MIXED_DTYPE_SYMBOLS } from "./kernel_abi/mixed_dtype.ts";

/** Every symbol of the kernel ABI, by part (one file each in ffi/kernel_abi/). */
export const KERNEL_SYMBOLS = {
  ...RUNTIME_SYMBOLS,
  ...ELEMENTWISE_SYMBOLS,
  ...ROW_SYMBOLS,
  ...ATTENTION_SYMBOLS,
  ...LAYOUT_SYMBOLS,
  ...GEMM_SYMBOLS,
  ...TENSOR_OP_SYMBOLS,
  ...CONV_SYMBOLS,
  ...POOL_NORM_SYMBOLS,
  ...OPTIM_SYMBOLS,
  ...MIXED_DTYPE_SYMBOLS,
} as const satisfies Deno.ForeignLibraryInterface;

export type KernelSymbols = typeof KERNEL_SYMBOLS;

/** Symbols that return a value, not a dt_status: called directly through `lib.symbols`. */
export const KERNEL_VALUE_SYMBOLS = [
  "dt_abi_version",
  "dt_last_error",
  "dt_backend_name",
  "dt_build_hash",
  "dt_get_num_threads",
  "dt_alloc",
] as const;

/** dt_status symbols without a trailing stream parameter. */
export const KERNEL_UNSTREAMED = ["dt_set_num_threads", "dt_free"] as const;

/** dt_status symbols whose last parameter is the stream. */
export type KernelStreamed = Exclude<
  keyof KernelSymbols,
  (typeof KERNEL_VALUE_SYMBOLS)[number] | (typeof KERNEL_UNSTREAMED)[number]
>;

/** The names of KernelStreamed, in table order. */
export const KERNEL_STREAMED = Object.keys(KERNEL_SYMBOLS).filter((name) =>
  !(KERNEL_VALUE_SYMBOLS as readonly string[]).includes(name) &&
  !(KERNEL_UNSTREAMED as readonly string[]).includes(name)
) as KernelStreamed[];

/**
 * Symbols of KERNEL_SYMBOLS that the CUDA library does not export yet (the
 * CPU library exports all of them). ffi/cuda.ts declares these as optional,
 * so the CUDA library still opens; an op that needs one on the GPU fails
 * naming it. Remove a name here once kernels/cuda exports it.
 */
export const CUDA_PENDING_SYMBOLS: ReadonlySet<keyof KernelSymbols> = new Set<keyof KernelSymbols>(
  [],
);
