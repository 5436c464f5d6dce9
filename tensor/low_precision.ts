/**
 * autocast's low-precision operands: a parameter (a leaf that requires grad)
 * is cast to bf16/f16 once per parameter generation — once per optimizer step,
 * or after any other in-place change (tensor/param_version.ts) — and the copy
 * is kept on the parameter for every use until then; other tensors are cast
 * at each use. The copy is no autograd node: ops that use it send their
 * gradient to the parameter itself.
 */
import { backend } from "./backend.ts";
import { castTensor, type Tensor } from "./tensor.ts";
import { type DType, DTYPE_CODE } from "./dtype.ts";
import { parameterGeneration } from "./param_version.ts";

/** How many parameter casts were made (for tests and DTRAIN_COUNT_CALLS). */
export const lowPrecisionStats = { parameterCasts: 0 };

/**
 * t in `dtype`: itself when it already is; the cached copy of a parameter
 * (recast when the parameter changed); a new cast of anything else.
 *
 * @example
 * ```ts
 * const w = lowPrecisionOf(linear.weight, "bf16"); // cast once per optimizer step
 * ```
 */
export function lowPrecisionOf(t: Tensor, dtype: DType): Tensor {
  if (t.dtype === dtype) return t;
  if (!t.requiresGrad || t.node !== null) return castTensor(t, dtype);
  const generation = parameterGeneration();
  const cached = t.lowPrecisionCopy;
  if (cached && !cached.copy.disposed && cached.copy.dtype === dtype) {
    if (cached.generation !== generation) {
      backend().call.dt_cast(
        cached.copy.ptr,
        DTYPE_CODE[dtype],
        t.ptr,
        DTYPE_CODE[t.dtype],
        BigInt(t.numel),
      );
      cached.generation = generation;
      lowPrecisionStats.parameterCasts++;
    }
    return cached.copy;
  }
  cached?.copy.dispose();
  const copy = castTensor(t, dtype).keep();
  t.lowPrecisionCopy = { copy, generation };
  lowPrecisionStats.parameterCasts++;
  return copy;
}
