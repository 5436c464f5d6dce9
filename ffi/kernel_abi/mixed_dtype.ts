/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Elementwise ops with operands in their own float dtypes (f32, bf16, f16) (ABI 3).
 *
 * @module
 */
import { I32, I64, P, STATUS } from "./c_types.ts";

export const MIXED_DTYPE_SYMBOLS = {
  // ---- mixed-dtype elementwise ops (ABI 3) --------------------------------
  /** dt_binary with each operand in its own float dtype (f32, bf16, f16):
   *  out[i] = a[i] op b[(i / inner) % bn], computed in f32 from the widened
   *  operands and rounded once into out_dtype (all f32: dt_binary's bits).
   *  out may alias a when their dtypes match. */
  dt_binary_ex: {
    parameters: [
      I32, // int32_t op: DT_OP_ADD 0, SUB 1, MUL 2, DIV 3
      P, // void* out [n]
      I32, // int32_t out_dtype
      P, // const void* a [n]
      I32, // int32_t a_dtype
      P, // const void* b [bn]
      I32, // int32_t b_dtype
      I64, // int64_t n
      I64, // int64_t bn
      I64, // int64_t inner
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (out, inp, n, dtype, stream): dt_gelu_fwd on f32/bf16/f16 data, computed
   *  in f32 and rounded once into dtype. */
  dt_gelu_fwd_ex: { parameters: [P, P, I64, I32, P], ...STATUS },
  /** (dinp, dout, inp, n, dtype, stream): dt_gelu_bwd with all three in dtype. */
  dt_gelu_bwd_ex: { parameters: [P, P, P, I64, I32, P], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;
