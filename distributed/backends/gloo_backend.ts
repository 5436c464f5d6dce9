/**
 * The CPU process group for ranks on several machines, on Gloo (the engine of
 * PyTorch's CPU collectives) through libdtrain_gloo.so. Every call first
 * exchanges call records among all ranks (mismatches fail on every rank with
 * both sides, a timeout names the ranks that did not arrive), then moves the
 * data with Gloo. allReduce can go through shared memory within each node
 * first (hierarchical): reduce-scatter in the node, Gloo all-reduce of each
 * rank's share between nodes, all-gather in the node.
 */
import { DT_ERR_ARG, SHM_DTYPE_CODE, SHM_REDUCE_CODE } from "../../ffi/shm.ts";
import { GLOO_OP, glooCalls, glooLibrary } from "../../ffi/gloo.ts";
import {
  type CollectiveDType,
  DTYPE_BYTES,
  type ReduceOp,
  type ResolvedBuffer,
} from "./collective_buffer.ts";
import type { Collective } from "./collective_args.ts";
import { CollectiveRunner } from "./collective_runner.ts";
import { CollectiveGroup } from "./collective_group.ts";
import { type GlooSettings, glooSettings } from "./gloo_config.ts";
import { GlooNativeGroup } from "./gloo_native_group.ts";
import { cBytes } from "../../ffi/native.ts";
import { NodeShm } from "./node_shm.ts";
import type { ResolvedProcessGroupConfig } from "../pg_config.ts";
import { COMPLETED, type Work } from "../process_group.ts";
import { attemptKeys } from "../control/store_keys.ts";

/** Groups opened by this process: every rank opens them in the same order. */
let groups = 0;

const SIXTEEN_BIT: readonly CollectiveDType[] = ["bf16", "f16"];

/** The native parts of a joined group. */
interface Joined {
  world: GlooNativeGroup;
  /** this node's shared-memory group and this local rank's column across nodes (hierarchical only) */
  node: NodeShm | null;
  column: GlooNativeGroup | null;
}

/**
 * The Gloo process group; create it with initProcessGroup() on several
 * machines. It joins its peers at its first collective, not in
 * initProcessGroup(): that first call is then reported like any other, so
 * the launcher's hang table shows who is waiting for whom even while the
 * group forms (a report sent just before a long synchronous call can be held
 * back behind it).
 */
export class GlooProcessGroup extends CollectiveGroup {
  readonly rank: number;
  readonly size: number;
  readonly backend = "gloo" as const;
  /** machines in the job */
  readonly nnodes: number;
  /** ranks on each machine */
  readonly ranksPerNode: number;
  /** whether allReduce goes through shared memory within each node first */
  readonly hierarchical: boolean;
  readonly #cfg: ResolvedProcessGroupConfig;
  readonly #settings: GlooSettings;
  readonly #gen: number;
  readonly #timeoutMs: number;
  #joined: Joined | null = null;
  #failed: Error | null = null;
  #scratch = new Uint8Array(0);
  #scratchPtr: Deno.PointerValue = null;
  protected readonly runner: CollectiveRunner;

  private constructor(cfg: ResolvedProcessGroupConfig, settings: GlooSettings) {
    super();
    this.rank = cfg.rank;
    this.size = cfg.size;
    this.nnodes = cfg.world.nnodes;
    this.ranksPerNode = cfg.world.localWorldSize;
    this.hierarchical = settings.hierarchy !== "off" && this.ranksPerNode > 1 && this.nnodes > 1;
    this.#cfg = cfg;
    this.#settings = settings;
    this.#gen = ++groups;
    this.#timeoutMs = cfg.timeoutMs;
    this.runner = new CollectiveRunner(
      {
        groupName: `Gloo process group of rank ${cfg.rank}`,
        hostOnly: "Gloo process group",
        abortForBadArguments: (reason) => {
          // Peers may be forming the group in this very call: join it first, so they hear why.
          try {
            this.#join(this.#timeoutMs);
          } catch { /* they will time out naming this rank */ }
          this.#abortAll(reason);
        },
        perform: (c, seq, timeoutMs) => this.#perform(c, seq, timeoutMs),
        failed: (e) => {
          this.#abortAll((e as Error).message);
          return e as Error;
        },
      },
      cfg.rank,
      cfg.size,
      cfg.timeoutMs,
    );
  }

  /**
   * The group of this launch. Checks the settings and loads the library now;
   * the rendezvous happens in the first collective: every rank's pair
   * addresses go through the run's control store, each connection proves it
   * belongs to the run, and a rank or node that does not join within the
   * timeout is named.
   */
  static open(cfg: ResolvedProcessGroupConfig): GlooProcessGroup {
    const settings = glooSettings(cfg);
    glooLibrary(); // a missing library is reported at once, not at the first collective
    return new GlooProcessGroup(cfg, settings);
  }

  /** Gloo's description of this rank's TCP device (interface, address, speed), once joined. */
  get device(): string | null {
    return this.#joined?.world.device ?? null;
  }

  /** Joins every part of the group (blocking), once, within `timeoutMs` (the first call's). */
  #join(timeoutMs: number): Joined {
    if (this.#joined) return this.#joined;
    if (this.#failed) throw this.#failed;
    const cfg = this.#cfg, s = this.#settings, world = cfg.world;
    const perNode = this.ranksPerNode;
    const node = world.groupRank;
    const keys = attemptKeys(s.attempt);
    const label = (r: number) => `rank ${r} (node ${Math.floor(r / perNode)})`;
    const common = { attemptAbortKey: keys.abort, detail: cfg.detail, timeoutMs };
    let all: GlooNativeGroup | null = null;
    let shm: NodeShm | null = null;
    try {
      all = GlooNativeGroup.open({
        ...common,
        prefix: keys.user(`gloo/${this.#gen}/world/`),
        member: cfg.rank,
        labels: Array.from({ length: cfg.size }, (_, r) => label(r)),
        identity: `rank ${cfg.rank} gloo`,
      }, s);
      if (!this.hierarchical) return this.#joined = { world: all, node: null, column: null };
      shm = NodeShm.open({
        name: `/dtrain-${cfg.runId}-a${s.attempt}-n${node}-gloo${this.#gen}`,
        localRank: world.localRank,
        localSize: perNode,
        firstRank: node * perNode,
        chunkBytes: cfg.chunkBytes,
        spinUs: cfg.spinUs,
        detail: cfg.detail,
        timeoutMs,
      });
      const column = GlooNativeGroup.open({
        ...common,
        prefix: keys.user(`gloo/${this.#gen}/column${world.localRank}/`),
        member: node,
        labels: Array.from({ length: this.nnodes }, (_, n) => label(n * perNode + world.localRank)),
        identity: `rank ${cfg.rank} gloo column`,
      }, s);
      return this.#joined = { world: all, node: shm, column };
    } catch (e) {
      const why = `rank ${cfg.rank} could not join the Gloo process group: ${(e as Error).message}`;
      all?.abort(DT_ERR_ARG, why);
      shm?.abort(DT_ERR_ARG, why);
      all?.close();
      shm?.close();
      this.#failed = e as Error;
      throw e;
    }
  }

  override close(): void {
    if (!this.runner.close()) return;
    const j = this.#joined;
    if (!j) return;
    let first: unknown = null;
    for (const part of [j.column, j.node, j.world]) {
      try {
        part?.close();
      } catch (e) {
        first ??= e;
      }
    }
    if (first) throw first;
  }

  /** Shared memory within the node, Gloo between nodes: each local rank carries
   *  1/ranksPerNode of the data across the network. Elements past the last
   *  whole share go through Gloo among all ranks. */
  #hierarchicalAllReduce(
    b: ResolvedBuffer,
    op: ReduceOp,
    seq: bigint,
    t: bigint,
  ): void {
    const per = this.ranksPerNode;
    const share = Math.floor(b.count / per);
    const es = DTYPE_BYTES[b.dtype];
    const scratch = this.#scratchOf(share * es);
    const timeoutMs = Number(t);
    this.#parts().node!.reduceScatter(
      scratch,
      b.ptr,
      share,
      b.dtype,
      op === "avg" ? "sum" : op,
      timeoutMs,
    );
    glooCalls().dt_gloo_allreduce(
      this.#parts().column!.handle,
      scratch,
      BigInt(share),
      SHM_DTYPE_CODE[b.dtype],
      SHM_REDUCE_CODE[op],
      BigInt(this.size),
      seq,
      t,
    );
    this.#parts().node!.allGather(b.ptr, scratch, share, b.dtype, timeoutMs);
    const tail = b.count - share * per;
    if (tail > 0) {
      glooCalls().dt_gloo_allreduce(
        this.#parts().world.handle,
        Deno.UnsafePointer.offset(b.ptr!, share * per * es),
        BigInt(tail),
        SHM_DTYPE_CODE[b.dtype],
        SHM_REDUCE_CODE[op],
        BigInt(this.size),
        seq,
        t,
      );
    }
  }

  /** The joined parts (the steps run only after #join succeeded). */
  #parts(): Joined {
    return this.#joined!;
  }

  #scratchOf(bytes: number): Deno.PointerValue {
    if (this.#scratch.length < bytes) {
      this.#scratch = new Uint8Array(bytes);
      this.#scratchPtr = Deno.UnsafePointer.of(this.#scratch);
    }
    return this.#scratchPtr;
  }

  /** Joins the group (at its first call), exchanges call records (a mismatch or a missing
   *  rank fails here, on every rank), then moves the data with Gloo. */
  #perform(c: Collective, seqNumber: number, timeoutMs: number): Work {
    const t = BigInt(Math.ceil(timeoutMs));
    const seq = BigInt(seqNumber);
    const { world } = this.#join(timeoutMs);
    glooCalls().dt_gloo_check(
      world.handle,
      GLOO_OP[c.op],
      SHM_DTYPE_CODE[c.dtype],
      BigInt(c.count),
      SHM_REDUCE_CODE[c.reduceOp],
      c.root,
      cBytes(c.name),
      t,
    );
    switch (c.op) {
      case "allReduce": {
        const b = c.inp!, op = c.reduceOp;
        const split = this.hierarchical && !SIXTEEN_BIT.includes(b.dtype) &&
          b.count >= this.ranksPerNode;
        if (split) {
          this.#hierarchicalAllReduce(b, op, seq, t);
        } else {
          glooCalls().dt_gloo_allreduce(
            world.handle,
            b.ptr,
            BigInt(b.count),
            SHM_DTYPE_CODE[b.dtype],
            SHM_REDUCE_CODE[op],
            BigInt(this.size),
            seq,
            t,
          );
        }
        break;
      }
      case "broadcast": {
        const b = c.inp!;
        glooCalls().dt_gloo_broadcast(
          world.handle,
          b.ptr,
          BigInt(b.count),
          SHM_DTYPE_CODE[b.dtype],
          c.root,
          seq,
          t,
        );
        break;
      }
      case "allGather": {
        const o = c.out!, i = c.inp!;
        glooCalls().dt_gloo_allgather(
          world.handle,
          o.ptr,
          i.ptr,
          BigInt(i.count),
          SHM_DTYPE_CODE[i.dtype],
          seq,
          t,
        );
        break;
      }
      case "reduceScatter": {
        const o = c.out!, i = c.inp!;
        glooCalls().dt_gloo_reduce_scatter(
          world.handle,
          o.ptr,
          i.ptr,
          BigInt(o.count),
          SHM_DTYPE_CODE[o.dtype],
          SHM_REDUCE_CODE[c.reduceOp],
          seq,
          t,
        );
        break;
      }
      case "barrier":
        break; // the call-record exchange was the barrier
    }
    return COMPLETED;
  }

  /** Fails every part of the group, so no peer waits for this rank. */
  #abortAll(reason: string): void {
    const j = this.#joined;
    j?.world.abort(DT_ERR_ARG, reason);
    j?.column?.abort(DT_ERR_ARG, reason);
    j?.node?.abort(DT_ERR_ARG, reason);
  }
}

export type { GlooSettings };
