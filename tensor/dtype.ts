/**
 * Tensor element types: the names the API uses, the codes the native ABI uses
 * (DT_F32 … in kernels/common/dt_common.h), and their sizes.
 */

/** Element type of a tensor: f32/bf16/f16 for values, i32/i64 for indices. */
export type DType = "f32" | "bf16" | "f16" | "i32" | "i64" | "u8";

/** Native dtype code, as in kernels/common/dt_common.h. */
export const DTYPE_CODE: Record<DType, number> = {
  f32: 0,
  bf16: 1,
  f16: 2,
  i32: 3,
  i64: 4,
  u8: 5,
};

/** Bytes per element. */
export const DTYPE_SIZE: Record<DType, number> = {
  f32: 4,
  bf16: 2,
  f16: 2,
  i32: 4,
  i64: 8,
  u8: 1,
};

/** The safetensors name of a dtype ("F32", "BF16", …). */
export const SAFETENSORS_NAME: Record<DType, string> = {
  f32: "F32",
  bf16: "BF16",
  f16: "F16",
  i32: "I32",
  i64: "I64",
  u8: "U8",
};
