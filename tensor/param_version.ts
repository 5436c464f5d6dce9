/**
 * The generation of parameter contents: a counter that every in-place change
 * of a parameter moves on (optimizer steps, copies and fills of tensors that
 * require grad, loading, DDP's broadcast), so that what is derived from
 * parameters (autocast's low-precision copies) knows when it is stale.
 */

let generation = 0;

/** Says that some parameter's contents changed in place. */
export function parametersChanged(): void {
  generation++;
}

/** The current generation (compare with the one a derived value was made at). */
export function parameterGeneration(): number {
  return generation;
}
