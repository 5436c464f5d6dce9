/**
 * Where each Dropout layer's mask stream stood when activation checkpointing
 * began a forward (nn/checkpoint.ts), so the recomputation in backward draws
 * the same masks: a Dropout layer notes itself here before it draws.
 */
import type { Dropout } from "./layers.ts";

/** The checkpointed forwards running now (nested ones too): layer → its offset at the first draw. */
const recorders: Map<Dropout, bigint>[] = [];

/** Called by Dropout.forward before it draws: the first offset of each layer, for every open recorder. */
export function noteDropoutDraw(layer: Dropout): void {
  for (const r of recorders) if (!r.has(layer)) r.set(layer, layer.offset);
}

/** Runs fn with `into` noting where each Dropout layer it runs started drawing. */
export function recordingDropoutDraws<T>(into: Map<Dropout, bigint>, fn: () => T): T {
  recorders.push(into);
  try {
    return fn();
  } finally {
    recorders.splice(recorders.lastIndexOf(into), 1);
  }
}
