/**
 * A caching allocator over the backend's dt_alloc/dt_free: freed blocks go
 * to a free list keyed by their rounded size and are handed out again, so a
 * training step that allocates the same shapes every time stops calling the
 * system allocator after its first step and its resident memory stays flat.
 */
import { backend } from "./backend.ts";
import { cString } from "../ffi/native.ts";

/** Sizes are rounded up to 256 bytes, or to 1/8 of their power of two above 64 KiB. */
function roundSize(bytes: number): number {
  if (bytes <= 65536) return Math.max(256, Math.ceil(bytes / 256) * 256);
  const step = 2 ** (Math.ceil(Math.log2(bytes)) - 3);
  return Math.ceil(bytes / step) * step;
}

const free = new Map<number, Deno.PointerObject[]>();
let cachedBytes = 0;
let liveBytes = 0;
let peakLiveBytes = 0;

/** A block of device memory: its pointer and its (rounded) capacity. */
export interface Block {
  ptr: Deno.PointerObject;
  capacity: number;
}

/** Returns a block of at least `bytes` bytes, reusing a cached one when possible. */
export function allocBlock(bytes: number): Block {
  const capacity = roundSize(bytes);
  const list = free.get(capacity);
  let ptr = list?.pop();
  if (ptr) {
    cachedBytes -= capacity;
  } else {
    const b = backend();
    const p = b.lib.symbols.dt_alloc(BigInt(capacity));
    if (p === null) {
      // Memory may be held in the cache: give it back and try once more.
      emptyCache();
      const q = b.lib.symbols.dt_alloc(BigInt(capacity));
      if (q === null) {
        throw new Error(
          `Cannot allocate ${capacity} bytes on ${b.device}: ${
            cString(b.lib.symbols.dt_last_error())
          }`,
        );
      }
      ptr = q;
    } else {
      ptr = p;
    }
  }
  liveBytes += capacity;
  if (liveBytes > peakLiveBytes) peakLiveBytes = liveBytes;
  return { ptr, capacity };
}

/** Returns a block to the cache. */
export function releaseBlock(block: Block): void {
  liveBytes -= block.capacity;
  cachedBytes += block.capacity;
  let list = free.get(block.capacity);
  if (!list) free.set(block.capacity, list = []);
  list.push(block.ptr);
}

/** Frees every cached block back to the system. */
export function emptyCache(): void {
  const b = backend();
  for (const list of free.values()) {
    for (const p of list) b.call.dt_free(p);
  }
  free.clear();
  cachedBytes = 0;
}

/** Bytes in live tensors, in the cache, and the peak of live bytes. */
export function memoryStats(): {
  liveBytes: number;
  cachedBytes: number;
  peakLiveBytes: number;
} {
  return { liveBytes, cachedBytes, peakLiveBytes };
}
