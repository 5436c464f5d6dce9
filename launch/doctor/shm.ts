/**
 * How much of /dev/shm a CPU run of N ranks takes: the shared-memory process
 * group's one segment, sized as kernels/shm/shm_segment.c sizes it (a control
 * area rounded up to a page, two data buffers per rank, then, when
 * DTRAIN_SHM_SHARED_BYTES asks for them, one shared region per rank from the
 * next page); and the region per rank DDP reserves for its gradient buckets
 * when no fixed one was asked for (kernels/shm/shm_regions.c).
 */
import { DEFAULT_CHUNK_BYTES } from "../../distributed/pg_config.ts";

/** sizeof(dt_shm_header_t) in kernels/shm/shm_internal.h (without its rank records). */
export const SHM_HEADER_BYTES = 128;
/** sizeof(dt_shm_rank_t): one rank's record in the control area. */
export const SHM_RANK_RECORD_BYTES = 576;
/** The data buffers start at a page boundary. */
const PAGE_BYTES = 4096;
/** DT_SHM_MAX_RANKS: the most ranks a CPU process group takes. */
export const SHM_MAX_RANKS = 256;
/** DT_SHM_MAX_CHUNK in kernels/shm/shm_segment.c: the largest data buffer. */
export const SHM_MAX_CHUNK_BYTES = 2 ** 30;

/**
 * Why dt_shm_open would refuse data buffers of `chunkBytes` for `world`
 * ranks (the rule of kernels/shm/shm_segment.c), or null when it accepts them.
 */
export function shmChunkProblem(world: number, chunkBytes: number): string | null {
  if (chunkBytes % 64 === 0 && chunkBytes >= 64 * world && chunkBytes <= SHM_MAX_CHUNK_BYTES) {
    return null;
  }
  return `DTRAIN_SHM_CHUNK_BYTES=${chunkBytes} must be a multiple of 64 between 64 x ranks ` +
    `(${64 * world}) and ${SHM_MAX_CHUNK_BYTES}`;
}

/**
 * Bytes of the segment a group of `world` ranks creates (and reserves with
 * posix_fallocate) with data buffers of `chunkBytes` each and shared regions
 * of `sharedBytes` each.
 *
 * @example
 * ```ts
 * shmSegmentBytes(2, 1 << 20); // 4096 + 2 * 2 * 1 MiB = 4198400
 * ```
 */
export function shmSegmentBytes(
  world: number,
  chunkBytes: number = DEFAULT_CHUNK_BYTES,
  sharedBytes = 0,
): number {
  const control = SHM_HEADER_BYTES + world * SHM_RANK_RECORD_BYTES;
  const dataOffset = Math.ceil(control / PAGE_BYTES) * PAGE_BYTES;
  const dataEnd = dataOffset + world * 2 * chunkBytes;
  if (sharedBytes === 0) return dataEnd;
  return Math.ceil(dataEnd / PAGE_BYTES) * PAGE_BYTES + world * sharedBytes;
}

/** DDP's default bucket capacity (DDPOptions.bucketCapMb). */
const DDP_BUCKET_CAP_BYTES = 25 * 2 ** 20;

/**
 * Bytes per rank DDP reserves in /dev/shm for the gradient buckets of `params`
 * f32 parameters (pg.reserveShared: every bucket from a 64-byte boundary, the
 * whole rounded up to a page): at most the gradients plus 64 bytes per bucket
 * of DDP's default 25 MiB.
 *
 * @example
 * ```ts
 * ddpSharedBytes(1_000_000); // 4,000,064 bytes rounded up to 4,001,792
 * ```
 */
export function ddpSharedBytes(params: number): number {
  const grads = params * 4;
  const buckets = Math.max(1, Math.ceil(grads / DDP_BUCKET_CAP_BYTES));
  return Math.ceil((grads + 64 * buckets) / PAGE_BYTES) * PAGE_BYTES;
}
