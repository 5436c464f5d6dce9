/**
 * The host tables of the one-launch optimizer steps (dt_adamw_many,
 * dt_sgd_many): the addresses, sizes and per-tensor scalars of every
 * parameter of one device, so a step is one native call (one kernel launch
 * on a GPU) whatever the number of parameters and groups.
 */
import type { Device } from "../tensor/backend.ts";
import type { Tensor } from "../tensor/tensor.ts";

/** A tensor's address as a table entry (0 for none). */
export function address(t: Tensor | null | undefined): bigint {
  return t ? BigInt(Deno.UnsafePointer.value(t.ptr)) : 0n;
}

/** A host array's address for an FFI pointer parameter. */
export function tablePtr(a: BufferSource): Deno.PointerValue {
  return Deno.UnsafePointer.of(a);
}

/**
 * Splits `items` by the device of their parameter (one native call per
 * device), keeping their order inside each device. Parameters and their
 * gradients and state must be f32 on that device; anything else is refused
 * naming the parameter.
 */
export function byDevice<T extends { p: Tensor; index: number }>(
  who: string,
  items: T[],
  tensorsOf: (item: T) => (Tensor | null | undefined)[],
): Map<Device, T[]> {
  const out = new Map<Device, T[]>();
  for (const it of items) {
    for (const t of [it.p, ...tensorsOf(it)]) {
      if (!t) continue;
      if (t.dtype !== "f32") {
        throw new TypeError(
          `${who}: parameter ${it.index} [${it.p.shape}] has ${
            t === it.p ? "" : "a gradient or state "
          }dtype ${t.dtype}; the optimizer updates f32 tensors`,
        );
      }
      if (t.device !== it.p.device) {
        throw new TypeError(
          `${who}: parameter ${it.index} [${it.p.shape}] is on ${it.p.device} but its gradient or state is on ${t.device}`,
        );
      }
      if (t.numel !== it.p.numel) {
        throw new RangeError(
          `${who}: parameter ${it.index} [${it.p.shape}] has a gradient or state of ${t.numel} elements`,
        );
      }
    }
    const list = out.get(it.p.device) ?? [];
    list.push(it);
    out.set(it.p.device, list);
  }
  return out;
}
