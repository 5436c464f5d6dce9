/**
 * A collective in flight: what ProcessGroup.allReduceStart returns. A backend
 * that overlaps collectives with compute (NCCL, on its own stream) hands out
 * real ones; a backend that completes the call before returning (shared
 * memory, a single process) hands out COMPLETED.
 */

/** A started collective; its buffers may be used only after wait(). */
export interface Work {
  /**
   * Returns once the result may be used (by this thread and by kernels
   * issued after it); throws the collective's failure. Calling it again
   * returns at once.
   */
  wait(): void;
}

/** The work of a collective that had completed when it was returned. */
export const COMPLETED: Work = Object.freeze({ wait() {} });
