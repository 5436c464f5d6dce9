/**
 * What kind of failure an error is, as a rank reports it to its launcher:
 * the rank's own error, a timeout that fired (a collective's, a barrier's, a
 * store wait's), or a consequence of another rank's failure (a peer closed
 * its process group, exited or aborted the group). Backends mark the errors
 * of their collectives; the launcher names the earliest failure that is not
 * a consequence.
 */
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

/**
 * Marks `error` as being of `kind` and, with `inCollective`, as the failure
 * of the collective call the rank last entered; returns it. Process-group
 * backends mark the errors of their collectives this way.
 */
export function withFailureKind<E extends Error>(
  error: E,
  kind: FailureKind,
  opts: { inCollective?: boolean } = {},
): E {
  Object.defineProperty(error, KIND, { value: kind, enumerable: false, configurable: true });
  if (opts.inCollective) {
    Object.defineProperty(error, IN_COLLECTIVE, { value: true, configurable: true });
  }
  return error;
}

/** The errors of `err` and its `cause` chain, without looping. */
function* chain(err: unknown): Generator<object> {
  const seen = new Set<unknown>();
  for (let e = err; e !== null && typeof e === "object" && !seen.has(e);) {
    seen.add(e);
    yield e;
    e = (e as { cause?: unknown }).cause;
  }
}

/** The kind of `err`, following `cause` links; "error" unless something says otherwise. */
export function failureKind(err: unknown): FailureKind {
  for (const e of chain(err)) {
    const marked = (e as Record<symbol, unknown>)[KIND];
    if (typeof marked === "string" && FAILURE_KINDS.includes(marked as FailureKind)) {
      return marked as FailureKind;
    }
    if (e instanceof StoreError && e.kind === "timeout") return "timeout";
  }
  return "error";
}

/** Whether `err` is the failure of a collective call itself (so the last one entered failed). */
export function failedInCollective(err: unknown): boolean {
  for (const e of chain(err)) {
    if ((e as Record<symbol, unknown>)[IN_COLLECTIVE] === true) return true;
  }
  return false;
}
