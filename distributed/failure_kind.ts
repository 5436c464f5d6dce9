/**
 * What kind of failure an error is, as a rank reports it to its launcher:
 * the rank's own error, a timeout that fired (a collective's, a barrier's, a
 * store wait's), or a consequence of another rank's failure (a peer closed
 * its process group, exited or aborted the group). The launcher names the
 * earliest failure that is not a consequence.
 */
import { DtNativeError } from "../ffi/native.ts";
import { DT_ERR_SYS, DT_ERR_TIMEOUT } from "../ffi/shm.ts";
import { StoreError } from "./store.ts";

/** How a rank failed. */
export type FailureKind =
  /** its own error: an exception in the script or the library, a mismatched collective */
  | "error"
  /** a wait ran past its timeout */
  | "timeout"
  /** a collective could not finish because another rank closed, left or aborted the group */
  | "peer";

/** Every kind, for parsing. */
export const FAILURE_KINDS: readonly FailureKind[] = ["error", "timeout", "peer"];

const KIND = Symbol.for("dtrain.failureKind");
const IN_COLLECTIVE = Symbol.for("dtrain.failedInCollective");

/** The shared-memory collectives: in them, DT_ERR_SYS means a peer is gone or aborted the group. */
const SHM_COLLECTIVES = new Set([
  "dt_shm_allreduce",
  "dt_shm_broadcast",
  "dt_shm_allgather",
  "dt_shm_reduce_scatter",
  "dt_shm_barrier",
]);

/**
 * Marks `error` as being of `kind` (for errors a backend builds itself) and,
 * with `inCollective`, as the failure of the collective the rank last
 * entered; returns it.
 */
export function withFailureKind<E extends Error>(
  error: E,
  kind: FailureKind,
  opts: { inCollective?: boolean } = {},
): E {
  Object.defineProperty(error, KIND, { value: kind, enumerable: false });
  if (opts.inCollective) Object.defineProperty(error, IN_COLLECTIVE, { value: true });
  return error;
}

/** Whether `err` is the failure of a collective call itself (so the last one entered failed). */
export function failedInCollective(err: unknown): boolean {
  const seen = new Set<unknown>();
  for (let e = err; e !== null && typeof e === "object" && !seen.has(e);) {
    seen.add(e);
    if ((e as Record<symbol, unknown>)[IN_COLLECTIVE] === true) return true;
    if (e instanceof DtNativeError && SHM_COLLECTIVES.has(e.symbol)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** The kind of `err`, following `cause` links; "error" unless something says otherwise. */
export function failureKind(err: unknown): FailureKind {
  const seen = new Set<unknown>();
  for (let e = err; e !== null && typeof e === "object" && !seen.has(e);) {
    seen.add(e);
    const marked = (e as Record<symbol, unknown>)[KIND];
    if (typeof marked === "string" && FAILURE_KINDS.includes(marked as FailureKind)) {
      return marked as FailureKind;
    }
    if (e instanceof DtNativeError && e.symbol.startsWith("dt_shm_")) {
      if (e.status === DT_ERR_TIMEOUT) return "timeout";
      if (e.status === DT_ERR_SYS && SHM_COLLECTIVES.has(e.symbol)) return "peer";
    }
    if (e instanceof StoreError && e.kind === "timeout") return "timeout";
    e = (e as { cause?: unknown }).cause;
  }
  return "error";
}
