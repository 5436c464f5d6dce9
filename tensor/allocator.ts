/**
 * A caching allocator over the backends' dt_alloc/dt_free: freed blocks go
 * to a free list keyed by their device and rounded size and are handed out
 * again, so a training step that allocates the same shapes every time stops
 * calling the system (or CUDA) allocator after its first step and its
 * resident memory stays flat. A block of one device is never handed out for
 * another, and each is freed by the library that allocated it.
 */
import { backend, backendOf, type Device } from "./backend.ts";
import { allocOrNull, lastAllocError } from "../ffi/value_calls.ts";
import { countMemory, currentMemoryKind, type MemoryKind } from "./memory_kinds.ts";

/** Sizes are rounded up to 256 bytes, or to 1/8 of their power of two above 64 KiB. */
function roundSize(bytes: number): number {
  if (bytes <= 65536) return Math.max(256, Math.ceil(bytes / 256) * 256);
  const step = 2 ** (Math.ceil(Math.log2(bytes)) - 3);
  return Math.ceil(bytes / step) * step;
}

/** Free lists: device -> rounded size -> pointers. */
const free = new Map<Device, Map<number, Deno.PointerObject[]>>();
let cachedBytes = 0;
let liveBytes = 0;
let peakLiveBytes = 0;

/** A block of device memory: its pointer, its (rounded) capacity, its device and what it holds. */
export interface Block {
  ptr: Deno.PointerObject;
  capacity: number;
  device: Device;
  /** what the block is counted as (tensor/memory_kinds.ts) */
  kind: MemoryKind;
  /** memory this allocator does not own (externalBlock): counted while live, never cached or freed */
  external?: true;
}

function freeList(device: Device, capacity: number): Deno.PointerObject[] {
  let bySize = free.get(device);
  if (!bySize) free.set(device, bySize = new Map());
  let list = bySize.get(capacity);
  if (!list) bySize.set(capacity, list = []);
  return list;
}

/** Returns a block of at least `bytes` bytes on the active device, reusing a cached one when possible. */
export function allocBlock(bytes: number): Block {
  const b = backend();
  const capacity = roundSize(bytes);
  let ptr = free.get(b.device)?.get(capacity)?.pop();
  if (ptr) {
    cachedBytes -= capacity;
  } else {
    const p = allocOrNull(b.lib, capacity);
    if (p === null) {
      // Memory may be held in the cache: give it back and try once more.
      emptyCache();
      const q = allocOrNull(b.lib, capacity);
      if (q === null) {
        throw new Error(`Cannot allocate ${capacity} bytes on ${b.kind}: ${lastAllocError(b.lib)}`);
      }
      ptr = q;
    } else {
      ptr = p;
    }
  }
  liveBytes += capacity;
  if (liveBytes > peakLiveBytes) peakLiveBytes = liveBytes;
  const kind = currentMemoryKind();
  countMemory(b.device, kind, capacity);
  return { ptr, capacity, device: b.device, kind };
}

/** Counts a live block as another kind from now on (a tensor registered as a parameter: weights). */
export function recountBlock(block: Block, kind: MemoryKind): void {
  if (block.kind === kind) return;
  countMemory(block.device, block.kind, -block.capacity);
  countMemory(block.device, kind, block.capacity);
  block.kind = kind;
}

/**
 * A block over `bytes` of host memory that its owner keeps alive (a process group's shared region):
 * counted as live like any block while a tensor holds it, but releasing it gives nothing back.
 */
export function externalBlock(ptr: Deno.PointerObject, bytes: number): Block {
  liveBytes += bytes;
  if (liveBytes > peakLiveBytes) peakLiveBytes = liveBytes;
  const kind = currentMemoryKind();
  countMemory("cpu", kind, bytes);
  return { ptr, capacity: bytes, device: "cpu", kind, external: true };
}

/** Returns a block to its device's cache (an external block: only stops counting it). */
export function releaseBlock(block: Block): void {
  liveBytes -= block.capacity;
  countMemory(block.device, block.kind, -block.capacity);
  if (block.external) return;
  cachedBytes += block.capacity;
  freeList(block.device, block.capacity).push(block.ptr);
}

/** Frees every cached block back to the library that allocated it. */
export function emptyCache(): void {
  for (const [device, bySize] of free) {
    const b = backendOf(device);
    for (const list of bySize.values()) {
      for (const p of list) b.call.dt_free(p);
    }
  }
  free.clear();
  cachedBytes = 0;
}

/**
 * Bytes in live tensors, in the cache, and the peak of live bytes. (liveBytes is the counterpart of
 * torch.cuda.memory_allocated, peakLiveBytes of max_memory_allocated, liveBytes + cachedBytes of
 * memory_reserved.)
 */
export function memoryStats(): {
  liveBytes: number;
  cachedBytes: number;
  peakLiveBytes: number;
} {
  return { liveBytes, cachedBytes, peakLiveBytes };
}
