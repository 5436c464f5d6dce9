/**
 * The data_order.jsonl digest of one rank's index order (run_record/format.ts's DataOrderRecord), apart
 * from run_record/record.ts so that the launcher, which writes run.json, does not load node:crypto.
 */
import { nodeCrypto } from "../os/node_builtin.ts";
import type { DataOrderRecord } from "./format.ts";

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * The data_order.jsonl line for one rank's index order in one epoch: the
 * sha256 of the indices as little-endian int32 bytes, and the first 16.
 *
 * @example
 * ```ts
 * orderDigest(0, 1, new Int32Array([5, 3, 9])); // → { epoch: 0, rank: 1, count: 3, sha256: "…", first: [5, 3, 9] }
 * ```
 */
export function orderDigest(epoch: number, rank: number, indices: Int32Array): DataOrderRecord {
  let bytes = new Uint8Array(indices.buffer, indices.byteOffset, indices.byteLength);
  if (!LITTLE_ENDIAN) {
    const view = new DataView(new ArrayBuffer(indices.byteLength));
    indices.forEach((v, i) => view.setInt32(4 * i, v, true));
    bytes = new Uint8Array(view.buffer);
  }
  const sha256 = nodeCrypto().createHash("sha256").update(bytes).digest("hex");
  return { epoch, rank, count: indices.length, sha256, first: Array.from(indices.subarray(0, 16)) };
}
