/**
 * The CPU process group for ranks on several machines, on Gloo (the engine of
 * PyTorch's CPU collectives) through libdtrain_gloo.so. Every call first
 * exchanges call records among all ranks (mismatches fail on every rank with
 * both sides, a timeout names the ranks that did not arrive), then moves the
 * data with Gloo. allReduce can go through shared memory within each node
 * first (hierarchical): reduce-scatter in the node, Gloo all-reduce of each
 * rank's share between nodes, all-gather in the node.
 */
import { DT_ERR_ARG } from "../ffi/shm.ts";
import { GLOO_OP, glooLibrary } from "../ffi/gloo.ts";
import { SHM_DTYPE_CODE, SHM_REDUCE_CODE } from "../ffi/shm.ts";
import { reportCollective } from "./phase.ts";
import {
  type BufferLike,
  checkReduceDType,
  checkReduceOp,
  checkSizes,
  type CollectiveDType,
  DTYPE_BYTES,
  type ReduceOp,
  resolveBuffer,
} from "./collective_buffer.ts";
import { type GlooSettings, glooSettings } from "./gloo_config.ts";
import { cString, GlooNativeGroup } from "./gloo_native_group.ts";
import { NodeShm } from "./node_shm.ts";
import type { ResolvedProcessGroupConfig } from "./pg_config.ts";
import type { CallOptions, ProcessGroup } from "./process_group.ts";
import { attemptKeys } from "./store_keys.ts";

/** Groups opened by this process: every rank opens them in the same order. */
let groups = 0;

/** The native steps of one collective, run after the call-record exchange. */
type Steps = (seq: bigint, timeoutMs: bigint) => void;

const SIXTEEN_BIT: readonly CollectiveDType[] = ["bf16", "f16"];

/** The Gloo process group; create it with initProcessGroup() on several machines. */
export class GlooProcessGroup implements ProcessGroup {
  readonly rank: number;
  readonly size: number;
  readonly backend = "gloo" as const;
  /** machines in the job */
  readonly nnodes: number;
  /** ranks on each machine */
  readonly ranksPerNode: number;
  /** whether allReduce goes through shared memory within each node first */
  readonly hierarchical: boolean;
  /** Gloo's description of this rank's TCP device (interface, address, speed) */
  readonly device: string;
  readonly #world: GlooNativeGroup;
  readonly #column: GlooNativeGroup | null;
  readonly #node: NodeShm | null;
  readonly #timeoutMs: number;
  #scratch = new Uint8Array(0);
  #scratchPtr: Deno.PointerValue = null;
  #seq = 0;
  #closed = false;

  private constructor(
    cfg: ResolvedProcessGroupConfig,
    world: GlooNativeGroup,
    node: NodeShm | null,
    column: GlooNativeGroup | null,
  ) {
    this.rank = cfg.rank;
    this.size = cfg.size;
    this.nnodes = cfg.world.nnodes;
    this.ranksPerNode = cfg.world.localWorldSize;
    this.#world = world;
    this.#node = node;
    this.#column = column;
    this.hierarchical = column !== null;
    this.device = world.device;
    this.#timeoutMs = cfg.timeoutMs;
  }

  /**
   * Joins the group of this launch (blocking): every rank's pair addresses go
   * through the run's control store, each connection proves it belongs to the
   * run, and the call returns once every rank has joined — or throws after
   * the timeout naming the ranks (and nodes) that did not.
   */
  static open(cfg: ResolvedProcessGroupConfig): GlooProcessGroup {
    const s = glooSettings(cfg);
    glooLibrary(); // a missing library is reported before anything waits on peers
    const { world } = cfg;
    const perNode = world.localWorldSize;
    const node = world.groupRank;
    const gen = ++groups;
    const keys = attemptKeys(s.attempt);
    const label = (r: number) => `rank ${r} (node ${Math.floor(r / perNode)})`;
    const common = {
      attemptAbortKey: keys.abort,
      detail: cfg.detail,
      timeoutMs: cfg.timeoutMs,
    };
    const hierarchical = s.hierarchy !== "off" && perNode > 1 && world.nnodes > 1;
    const rec = { seq: 0, op: "barrier", bytes: 0, detail: `Gloo process group ${gen} start` };
    reportCollective(rec, "enter");
    let all: GlooNativeGroup | null = null;
    let shm: NodeShm | null = null;
    try {
      all = GlooNativeGroup.open({
        ...common,
        prefix: keys.user(`gloo/${gen}/world/`),
        member: cfg.rank,
        labels: Array.from({ length: cfg.size }, (_, r) => label(r)),
        identity: `rank ${cfg.rank} gloo`,
      }, s);
      if (!hierarchical) return new GlooProcessGroup(cfg, all, null, null);
      shm = NodeShm.open({
        name: `/dtrain-${cfg.runId}-a${s.attempt}-n${node}-gloo${gen}`,
        localRank: world.localRank,
        localSize: perNode,
        firstRank: node * perNode,
        chunkBytes: cfg.chunkBytes,
        spinUs: cfg.spinUs,
        detail: cfg.detail,
        timeoutMs: cfg.timeoutMs,
      });
      const column = GlooNativeGroup.open({
        ...common,
        prefix: keys.user(`gloo/${gen}/column${world.localRank}/`),
        member: node,
        labels: Array.from(
          { length: world.nnodes },
          (_, n) => label(n * perNode + world.localRank),
        ),
        identity: `rank ${cfg.rank} gloo column`,
      }, s);
      return new GlooProcessGroup(cfg, all, shm, column);
    } catch (e) {
      const why = `rank ${cfg.rank} could not join the Gloo process group: ${(e as Error).message}`;
      all?.abort(DT_ERR_ARG, why);
      shm?.abort(DT_ERR_ARG, why);
      all?.close();
      shm?.close();
      throw e;
    } finally {
      reportCollective(rec, "exit");
    }
  }

  allReduce(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): void {
    this.#run("allReduce", opts, () => {
      const b = resolveBuffer(buf, "allReduce buf");
      checkReduceDType(checkReduceOp(op, "allReduce"), b.dtype, "allReduce");
      const record = [GLOO_OP.allReduce, b.dtype, b.count, op, -1, ""] as const;
      const flat: Steps = (seq, t) =>
        this.#checked(
          glooLibrary().symbols.dt_gloo_allreduce(
            this.#world.handle,
            b.ptr,
            BigInt(b.count),
            SHM_DTYPE_CODE[b.dtype],
            SHM_REDUCE_CODE[op],
            BigInt(this.size),
            seq,
            t,
          ),
          "dt_gloo_allreduce",
        );
      const split = this.#node !== null && !SIXTEEN_BIT.includes(b.dtype) &&
        b.count >= this.ranksPerNode;
      const steps: Steps = split ? (seq, t) => this.#hierarchicalAllReduce(b, op, seq, t) : flat;
      return [b.bytes, record, steps];
    });
  }

  broadcast(buf: BufferLike, root: number, opts: CallOptions = {}): void {
    this.#run("broadcast", opts, () => {
      const b = resolveBuffer(buf, "broadcast buf");
      if (!Number.isInteger(root) || root < 0 || root >= this.size) {
        throw new RangeError(
          `broadcast: root ${root} is not a rank of this group (size ${this.size})`,
        );
      }
      const record = [GLOO_OP.broadcast, b.dtype, b.count, "sum", root, ""] as const;
      const steps: Steps = (seq, t) =>
        this.#checked(
          glooLibrary().symbols.dt_gloo_broadcast(
            this.#world.handle,
            b.ptr,
            BigInt(b.count),
            SHM_DTYPE_CODE[b.dtype],
            root,
            seq,
            t,
          ),
          "dt_gloo_broadcast",
        );
      return [b.bytes, record, steps];
    }, `root ${root}`);
  }

  allGather(out: BufferLike, inp: BufferLike, opts: CallOptions = {}): void {
    this.#run("allGather", opts, () => {
      const o = resolveBuffer(out, "allGather out");
      const i = resolveBuffer(inp, "allGather inp");
      checkSizes(o, i, this.size, 1, "allGather");
      const record = [GLOO_OP.allGather, i.dtype, i.count, "sum", -1, ""] as const;
      const steps: Steps = (seq, t) =>
        this.#checked(
          glooLibrary().symbols.dt_gloo_allgather(
            this.#world.handle,
            o.ptr,
            i.ptr,
            BigInt(i.count),
            SHM_DTYPE_CODE[i.dtype],
            seq,
            t,
          ),
          "dt_gloo_allgather",
        );
      return [i.bytes, record, steps];
    });
  }

  reduceScatter(
    out: BufferLike,
    inp: BufferLike,
    op: ReduceOp = "sum",
    opts: CallOptions = {},
  ): void {
    this.#run("reduceScatter", opts, () => {
      const o = resolveBuffer(out, "reduceScatter out");
      const i = resolveBuffer(inp, "reduceScatter inp");
      checkSizes(o, i, 1, this.size, "reduceScatter");
      checkReduceDType(checkReduceOp(op, "reduceScatter"), o.dtype, "reduceScatter");
      const record = [GLOO_OP.reduceScatter, o.dtype, o.count, op, -1, ""] as const;
      const steps: Steps = (seq, t) =>
        this.#checked(
          glooLibrary().symbols.dt_gloo_reduce_scatter(
            this.#world.handle,
            o.ptr,
            i.ptr,
            BigInt(o.count),
            SHM_DTYPE_CODE[o.dtype],
            SHM_REDUCE_CODE[op],
            BigInt(this.size),
            seq,
            t,
          ),
          "dt_gloo_reduce_scatter",
        );
      return [o.bytes, record, steps];
    });
  }

  barrier(name: string, opts: CallOptions = {}): void {
    // The call-record exchange is itself a barrier: every rank waits for every other's record.
    this.#run("barrier", opts, () => {
      const record = [GLOO_OP.barrier, "u8", 0, "sum", -1, String(name)] as const;
      return [0, record, () => {}];
    }, String(name));
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    let first: unknown = null;
    for (const part of [this.#column, this.#node, this.#world]) {
      try {
        part?.close();
      } catch (e) {
        first ??= e;
      }
    }
    if (first) throw first;
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /** Shared memory within the node, Gloo between nodes: each local rank carries
   *  1/ranksPerNode of the data across the network. Elements past the last
   *  whole share go through Gloo among all ranks. */
  #hierarchicalAllReduce(
    b: ReturnType<typeof resolveBuffer>,
    op: ReduceOp,
    seq: bigint,
    t: bigint,
  ): void {
    const per = this.ranksPerNode;
    const share = Math.floor(b.count / per);
    const es = DTYPE_BYTES[b.dtype];
    const scratch = this.#scratchOf(share * es);
    const timeoutMs = Number(t);
    const lib = glooLibrary().symbols;
    this.#node!.reduceScatter(scratch, b.ptr, share, b.dtype, op === "avg" ? "sum" : op, timeoutMs);
    this.#checked(
      lib.dt_gloo_allreduce(
        this.#column!.handle,
        scratch,
        BigInt(share),
        SHM_DTYPE_CODE[b.dtype],
        SHM_REDUCE_CODE[op],
        BigInt(this.size),
        seq,
        t,
      ),
      "dt_gloo_allreduce",
    );
    this.#node!.allGather(b.ptr, scratch, share, b.dtype, timeoutMs);
    const tail = b.count - share * per;
    if (tail > 0) {
      this.#checked(
        lib.dt_gloo_allreduce(
          this.#world.handle,
          Deno.UnsafePointer.offset(b.ptr!, share * per * es),
          BigInt(tail),
          SHM_DTYPE_CODE[b.dtype],
          SHM_REDUCE_CODE[op],
          BigInt(this.size),
          seq,
          t,
        ),
        "dt_gloo_allreduce",
      );
    }
  }

  #scratchOf(bytes: number): Deno.PointerValue {
    if (this.#scratch.length < bytes) {
      this.#scratch = new Uint8Array(bytes);
      this.#scratchPtr = Deno.UnsafePointer.of(this.#scratch);
    }
    return this.#scratchPtr;
  }

  #checked(status: number, symbol: string): void {
    glooLibrary().check(status, symbol);
  }

  /** Checks the arguments (`prepare` returns the payload bytes, the call
   *  record and the native steps), reports the call, exchanges call records,
   *  and runs the steps. Any failure fails the whole group on every rank. */
  #run(
    op: string,
    opts: CallOptions,
    prepare: () => readonly [
      number,
      readonly [number, CollectiveDType, number, ReduceOp, number, string],
      Steps,
    ],
    detail?: string,
  ): void {
    if (this.#closed) {
      throw new Error(`${op}: the Gloo process group of rank ${this.rank} is closed`);
    }
    const seq = ++this.#seq;
    let bytes: number, record, steps: Steps, timeoutMs: number;
    try {
      [bytes, record, steps] = prepare();
      timeoutMs = opts.timeoutMs ?? this.#timeoutMs;
      if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
        throw new RangeError(`${op}: timeoutMs must be a positive number, got ${timeoutMs}`);
      }
    } catch (e) {
      this.#abortAll(
        `rank ${this.rank} called ${op} #${seq} with bad arguments: ${(e as Error).message}`,
      );
      throw e;
    }
    const rec = detail === undefined ? { seq, op, bytes } : { seq, op, bytes, detail };
    reportCollective(rec, "enter");
    try {
      const [code, dtype, count, redop, root, name] = record;
      const t = BigInt(Math.ceil(timeoutMs));
      this.#checked(
        glooLibrary().symbols.dt_gloo_check(
          this.#world.handle,
          code,
          SHM_DTYPE_CODE[dtype],
          BigInt(count),
          SHM_REDUCE_CODE[redop],
          root,
          cString(name),
          t,
        ),
        "dt_gloo_check",
      );
      steps(BigInt(seq), t);
    } catch (e) {
      this.#abortAll((e as Error).message);
      throw e;
    } finally {
      reportCollective(rec, "exit");
    }
  }

  /** Fails every part of the group, so no peer waits for this rank. */
  #abortAll(reason: string): void {
    this.#world.abort(DT_ERR_ARG, reason);
    this.#column?.abort(DT_ERR_ARG, reason);
    this.#node?.abort(DT_ERR_ARG, reason);
  }
}

export type { GlooSettings };
