/**
 * Deno FFI type names of the C parameters the kernel ABI uses, short enough to keep each
 * table entry on one line.
 *
 * @module
 */
export const P = "pointer" as const;
export const I64 = "i64" as const;
export const I32 = "i32" as const;
export const F32 = "f32" as const;
export const F64 = "f64" as const;
export const B = "buffer" as const;
/** The result of every dt_status symbol. */
export const STATUS = { result: I32 } as const;
