/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Layout: column slices and their scatter, attention's head transpose, row gathers.
 *
 * @module
 */
import { I64, P, STATUS } from "./c_types.ts";

export const LAYOUT_SYMBOLS = {
  // ---- layout ---------------------------------------------------------------
  /** out[r, :] = inp[r, start : start + len]. */
  dt_slice_cols: {
    parameters: [
      P, // void* out [rows, len]
      P, // const void* inp [rows, in_cols]
      I64, // int64_t rows
      I64, // int64_t in_cols
      I64, // int64_t start
      I64, // int64_t len
      I64, // int64_t elem_bytes
      P, // void* stream
    ],
    ...STATUS,
  },
  /** dst[r, start : start + len] = src[r, :]; other columns untouched. */
  dt_scatter_cols: {
    parameters: [
      P, // void* dst [rows, dst_cols]
      P, // const void* src [rows, len]
      I64, // int64_t rows
      I64, // int64_t dst_cols
      I64, // int64_t start
      I64, // int64_t len
      I64, // int64_t elem_bytes
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (A,B,C,D) -> (A,C,B,D); A = D = 1 is a 2-D transpose. */
  dt_transpose_0213: {
    parameters: [
      P, // void* out [A, C, B, D]
      P, // const void* inp [A, B, C, D]
      I64, // int64_t A
      I64, // int64_t B
      I64, // int64_t C
      I64, // int64_t D
      I64, // int64_t elem_bytes
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (out, inp, idx i32[n], n, row_bytes, stream): out row i = inp row idx[i]
   *  (data-loader collation); a negative index is a data error (CUDA: its
   *  row's bytes are all ones). */
  dt_gather_rows: { parameters: [P, P, P, I64, I64, P], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;
