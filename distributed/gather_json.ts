/**
 * allGatherJson: every rank's JSON-able value, in rank order, on every rank —
 * for small metadata (parameter lists, RNG states, data-order digests), not
 * for tensors. Two allGathers: the byte lengths, then the padded bytes.
 */
import type { ProcessGroup } from "./process_group.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Each rank's `value`, indexed by rank. */
export function allGatherJson<T>(pg: ProcessGroup, value: T): T[] {
  const bytes = encoder.encode(JSON.stringify(value));
  if (pg.size === 1) return [JSON.parse(decoder.decode(bytes)) as T];
  const lengths = new Int32Array(pg.size);
  pg.allGather(lengths, Int32Array.of(bytes.length));
  const maxLen = Math.max(...lengths);
  const padded = new Uint8Array(maxLen);
  padded.set(bytes);
  const all = new Uint8Array(maxLen * pg.size);
  pg.allGather(all, padded);
  return [...lengths].map((len, r) =>
    JSON.parse(decoder.decode(all.subarray(r * maxLen, r * maxLen + len))) as T
  );
}
