/**
 * The process group of a process that runs alone (no launcher environment,
 * or WORLD_SIZE=1): every collective is an identity (allGather and
 * reduceScatter copy inp to out), so single-process code runs the same
 * calls, with the same argument checks and phase reports, as a distributed one.
 * GPU memory is copied by the GPU (on the compute stream), never touched by
 * the host; a copy between host and GPU memory is refused.
 */
import { backendOf, type Device } from "../../tensor/backend.ts";
import type { ResolvedBuffer } from "./collective_buffer.ts";
import type { Collective } from "./collective_args.ts";
import { CollectiveRunner } from "./collective_runner.ts";
import { CollectiveGroup } from "./collective_group.ts";
import { COMPLETED, type Work } from "../process_group.ts";

/** Where a buffer is: its own `device`, else the group's. */
function placeOf(b: ResolvedBuffer, group: Device): Device {
  return b.device ?? group;
}

/** Throws unless out and inp are on one device (the copy is that device's). */
function checkSameDevice(o: ResolvedBuffer, i: ResolvedBuffer, group: Device, what: string): void {
  const [od, id] = [placeOf(o, group), placeOf(i, group)];
  if (od !== id) {
    throw new TypeError(
      `${what}: out is ${od === "cuda" ? "GPU" : "host"} memory but inp is ${
        id === "cuda" ? "GPU" : "host"
      } memory; a world of one copies inp to out, so both must be on one device`,
    );
  }
}

/** Copies `src` to `dst` (a no-op when they are the same): host memory by the host, GPU memory by the GPU. */
function copyBuffer(dst: ResolvedBuffer, src: ResolvedBuffer, group: Device): void {
  if (src.bytes === 0 || dst.ptr === null || src.ptr === null) return;
  if (Deno.UnsafePointer.equals(dst.ptr, src.ptr)) return;
  if (placeOf(src, group) === "cuda") {
    backendOf("cuda").call.dt_memcpy(dst.ptr, src.ptr, BigInt(src.bytes), 3); // device to device
    return;
  }
  const to = new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(dst.ptr, dst.bytes));
  to.set(new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(src.ptr, src.bytes)));
}

/** A world of one rank; create it with initProcessGroup(). */
export class SingleProcessGroup extends CollectiveGroup {
  readonly rank = 0;
  readonly size = 1;
  readonly backend = "single" as const;
  /** The memory kind of buffers that do not say theirs: the process's device at creation. */
  readonly device: Device;
  protected readonly runner: CollectiveRunner;

  constructor(timeoutMs: number, device: Device = "cpu") {
    super();
    this.device = device;
    this.runner = new CollectiveRunner(
      {
        groupName: "single-process group",
        hostOnly: null,
        checkArgs: (c) => {
          if (c.op === "allGather" || c.op === "reduceScatter") {
            checkSameDevice(c.out!, c.inp!, this.device, c.op);
          }
        },
        abortForBadArguments: () => {}, // no peer waits for this rank
        perform: (c) => this.#perform(c),
        failed: (e) => e as Error,
      },
      0,
      1,
      timeoutMs,
    );
  }

  override close(): void {
    this.runner.close();
  }

  /** With one rank a collective is an identity: allGather and reduceScatter copy inp to out. */
  #perform(c: Collective): Work {
    if (c.op === "allGather" || c.op === "reduceScatter") copyBuffer(c.out!, c.inp!, this.device);
    return COMPLETED;
  }
}
