/**
 * The weight cast cache of autocast: a parameter (a leaf that requires grad)
 * is rounded to bf16/f16 once and the copy reused by every product that
 * reads it until the parameter changes, instead of once per use. An entry is
 * used only while the parameter's write counter (Tensor.version: copyFrom,
 * fill, loading a state dict, DDP's broadcast, markModified) is the one it
 * was cast at, and every optimizer step drops them all (dropWeightCasts), so
 * a stale copy is never read. Gradients still go to the f32 parameter: the
 * products record the parameter, not its copy.
 */
import { castTensor, type Tensor } from "./tensor.ts";
import type { DType } from "./dtype.ts";

interface Entry {
  dtype: DType;
  version: number;
  /** the cast copy, owned by the cache; users get views of it (own references to its memory) */
  cast: Tensor;
}

const cache = new Map<Tensor, Entry>();

/** Whether `t` is a parameter: a leaf that requires grad (activations are never cached). */
function isParameter(t: Tensor): boolean {
  return t.requiresGrad && t.node === null;
}

/**
 * `t` converted to `dtype`: for a parameter, a view of the cached copy (made
 * now if there is none for its current version); for anything else a fresh
 * cast. Either way the caller owns the returned tensor (the current scope
 * frees it), and the cache's copy lives on until the parameter changes.
 */
export function castOperand(t: Tensor, dtype: DType): Tensor {
  if (!isParameter(t)) return castTensor(t, dtype);
  const e = cache.get(t);
  if (e && e.dtype === dtype && e.version === t.version && !e.cast.disposed) {
    return e.cast.view(t.shape);
  }
  if (e) {
    e.cast.dispose(); // views handed out earlier keep the memory until they are freed
    cache.delete(t);
  }
  sweepDisposed();
  const cast = castTensor(t, dtype).keep();
  cache.set(t, { dtype, version: t.version, cast });
  return cast.view(t.shape);
}

/** Forgets entries of parameters that were disposed (their copies are freed). */
function sweepDisposed(): void {
  for (const [p, e] of cache) {
    if (p.disposed) {
      e.cast.dispose();
      cache.delete(p);
    }
  }
}

/**
 * Drops every cached copy (optimizers call it after each step; call it to
 * free the copies' memory). Views in use keep their memory until freed.
 */
export function dropWeightCasts(): void {
  if (cache.size === 0) return;
  for (const e of cache.values()) e.cast.dispose();
  cache.clear();
}
