/**
 * Conversions between dtrain tensors (native memory) and safetensors entries
 * (host bytes): what checkpoints, weight files and fixtures go through.
 */
import type { StDType, StTensor } from "../io/st_tensor.ts";
import { type DType, SAFETENSORS_NAME } from "./dtype.ts";
import { empty, type Tensor } from "./tensor.ts";

const FROM_ST: Partial<Record<StDType, DType>> = {
  F32: "f32",
  BF16: "bf16",
  F16: "f16",
  I32: "i32",
  I64: "i64",
  U8: "u8",
};

/** A copy of a tensor's bytes as a safetensors entry. */
export function toStTensor(t: Tensor): StTensor {
  return { dtype: SAFETENSORS_NAME[t.dtype] as StDType, shape: [...t.shape], data: t.toBytes() };
}

/** A new tensor holding a safetensors entry's bytes. */
export function fromStTensor(st: StTensor, what = "tensor"): Tensor {
  const dt = FROM_ST[st.dtype];
  if (!dt) throw new TypeError(`${what}: dtype ${st.dtype} is not supported by dtrain tensors`);
  return empty(st.shape, dt).copyFromArray(st.data);
}
