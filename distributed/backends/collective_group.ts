/**
 * The part of a ProcessGroup that is the same in every backend: each
 * collective is its runner's (collective_runner.ts), with the interface's
 * defaults. A backend extends this class, builds its runner over its
 * CollectiveBackend in its constructor, and writes close() itself.
 */
import type { BufferLike, ReduceOp } from "./collective_buffer.ts";
import type { CollectiveRunner } from "./collective_runner.ts";
import type { CallOptions, ProcessGroup, Work } from "../process_group.ts";

/** A ProcessGroup whose collectives go through a CollectiveRunner. */
export abstract class CollectiveGroup implements ProcessGroup {
  abstract readonly rank: number;
  abstract readonly size: number;
  abstract readonly backend: ProcessGroup["backend"];
  /** Runs every collective of this group; set by the backend's constructor. */
  protected abstract readonly runner: CollectiveRunner;

  allReduce(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): void {
    this.runner.allReduce(buf, op, opts);
  }

  allReduceStart(buf: BufferLike, op: ReduceOp = "sum", opts: CallOptions = {}): Work {
    return this.runner.allReduceStart(buf, op, opts);
  }

  broadcast(buf: BufferLike, root: number, opts: CallOptions = {}): void {
    this.runner.broadcast(buf, root, opts);
  }

  allGather(out: BufferLike, inp: BufferLike, opts: CallOptions = {}): void {
    this.runner.allGather(out, inp, opts);
  }

  reduceScatter(
    out: BufferLike,
    inp: BufferLike,
    op: ReduceOp = "sum",
    opts: CallOptions = {},
  ): void {
    this.runner.reduceScatter(out, inp, op, opts);
  }

  barrier(name: string, opts: CallOptions = {}): void {
    this.runner.barrier(name, opts);
  }

  abstract close(): void;

  [Symbol.dispose](): void {
    this.close();
  }
}
