/**
 * What the checkpoint manager and its commit worker say to each other: the
 * job message, and the shared-memory answer the manager can wait for
 * synchronously (Atomics.wait), also from an exit handler.
 */
import type { RotationPolicy } from "./rotation.ts";

/** A commit for the worker; the files' buffers are transferred, not copied. */
export interface CommitJob {
  kind: "commit";
  root: string;
  fsync: boolean;
  step: number;
  files: { name: string; bytes: Uint8Array }[];
  policy: RotationPolicy;
  /** the answer: ANSWER's layout */
  sab: SharedArrayBuffer;
}

/** After the manager ran its saved-hooks: rotate (the policy came with the job). */
export interface RotateJob {
  kind: "rotate";
}

/** Layout of the answer: [state, length] as i32, then `length` bytes of JSON. */
export const ANSWER = {
  STATE: 0,
  LENGTH: 1,
  HEADER_BYTES: 8,
  /** room for the error text and the warnings (more warnings are cut) */
  MAX_BYTES: 1 << 18,
} as const;

/** The answer's states, in the order they are reached. */
export const STATE = {
  /** writing */
  PENDING: 0,
  /** durable and `latest` names it; JSON {dir, warnings}; rotation waits for a RotateJob */
  COMMITTED: 1,
  /** rotated; JSON {warnings} */
  DONE: 2,
  /** the commit failed and was rolled back; JSON {error, warnings} */
  FAILED: 3,
} as const;

/** A failure as it crosses the thread boundary. */
export interface CommitFailure {
  message: string;
  cause?: { name: string; message: string; code?: string };
}

/** Stores `state` and its JSON in `sab` and wakes a waiter; warnings beyond the room are cut. */
export function writeAnswer(
  sab: SharedArrayBuffer,
  state: number,
  body: { dir?: string; warnings: string[]; error?: CommitFailure },
): void {
  const enc = new TextEncoder();
  let bytes = enc.encode(JSON.stringify(body));
  for (let keep = body.warnings.length - 1; bytes.length > ANSWER.MAX_BYTES && keep >= 0; keep--) {
    const cut = body.warnings.length - keep;
    const warnings = [...body.warnings.slice(0, keep), `(${cut} more warnings left out)`];
    bytes = enc.encode(JSON.stringify({ ...body, warnings }));
  }
  if (bytes.length > ANSWER.MAX_BYTES) {
    const error = { message: (body.error?.message ?? "").slice(0, ANSWER.MAX_BYTES / 8) };
    bytes = enc.encode(JSON.stringify({ dir: body.dir, warnings: [], error }));
  }
  const head = new Int32Array(sab, 0, 2);
  new Uint8Array(sab, ANSWER.HEADER_BYTES, bytes.length).set(bytes);
  Atomics.store(head, ANSWER.LENGTH, bytes.length);
  Atomics.store(head, ANSWER.STATE, state);
  Atomics.notify(head, ANSWER.STATE);
}

/** The JSON of the answer in `sab` (call once its state is no longer PENDING). */
export function readAnswer(
  sab: SharedArrayBuffer,
): { dir?: string; warnings: string[]; error?: CommitFailure } {
  const head = new Int32Array(sab, 0, 2);
  const len = Atomics.load(head, ANSWER.LENGTH);
  const bytes = new Uint8Array(sab, ANSWER.HEADER_BYTES, len).slice();
  return JSON.parse(new TextDecoder().decode(bytes));
}
