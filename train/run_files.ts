/**
 * The files rank 0's training code adds to the run directory: config.json
 * (resolved config, seed, world size, device) and data_order.jsonl (each
 * epoch's index-order digest of every rank). A null directory writes nothing.
 */
import { join } from "node:path";
import { createHash } from "node:crypto";

/** One epoch's order of one rank, as data_order.jsonl records it. */
export interface OrderDigest {
  epoch: number;
  rank: number;
  count: number;
  /** sha256 of the indices as little-endian int32 */
  sha256: string;
  /** the first (up to 16) indices */
  first: number[];
}

export class RunFiles {
  constructor(readonly dir: string | null) {}

  /** The digest of an index order (any rank computes its own). */
  orderDigest(epoch: number, rank: number, indices: Int32Array): OrderDigest {
    const bytes = new Uint8Array(indices.buffer, indices.byteOffset, indices.byteLength);
    return {
      epoch,
      rank,
      count: indices.length,
      sha256: createHash("sha256").update(bytes).digest("hex"),
      first: [...indices.subarray(0, 16)],
    };
  }

  /** Writes config.json (once per process; a resumed attempt rewrites the same content). */
  writeConfig(value: Record<string, unknown>): void {
    if (!this.dir) return;
    const path = join(this.dir, "config.json");
    const tmp = `${path}.tmp-${Deno.pid}`;
    Deno.writeTextFileSync(tmp, JSON.stringify(value, null, 2) + "\n");
    Deno.renameSync(tmp, path);
  }

  /** Appends every rank's digest of one epoch to data_order.jsonl. */
  appendDataOrder(digests: OrderDigest[]): void {
    if (!this.dir) return;
    const lines = digests.map((d) => JSON.stringify(d)).join("\n") + "\n";
    Deno.writeTextFileSync(join(this.dir, "data_order.jsonl"), lines, { append: true });
  }
}
