/**
 * Control-store calls for synchronous code: initProcessGroup() is
 * synchronous (as torch's), but the store client is asynchronous, so a
 * worker with a store connection of its own runs a short list of calls while
 * this thread waits for its answer on a SharedArrayBuffer, at most a
 * deadline. The NCCL group exchanges its unique id this way.
 */
import { getWorld, storeToken } from "./env.ts";
import { workerModuleUrl } from "../../os/install_layout.ts";

/** One store call: set a value, add to a counter, or get a value (waiting up to timeoutMs for it
 *  to appear; without timeoutMs, null when it is absent). */
export type SyncStoreOp =
  | { op: "set"; key: string; value: Uint8Array }
  | { op: "add"; key: string; amount: number }
  | { op: "get"; key: string; timeoutMs?: number };

/** What the worker needs: where the store is and the run's secret. */
export interface SyncStoreRequest {
  host: string;
  port: number;
  token: string;
  identity: string;
  ops: SyncStoreOp[];
  sab: SharedArrayBuffer;
}

/** Layout of the answer: [state, length] as i32, then the bytes. */
export const ANSWER = {
  /** 0 running, 1 done, 2 failed (the bytes are the error text) */
  STATE: 0,
  LENGTH: 1,
  HEADER_BYTES: 8,
  /** room for every result (unique ids, counters) or an error text */
  MAX_BYTES: 1 << 16,
} as const;

/** The results of a call list: one entry per op (`get`: the value; `add`: the new count; `set`: null). */
export type SyncStoreResults = (Uint8Array | number | null)[];

/** Encodes results as [u32 count] then, per result, [i32 kind][u32 length][bytes]. */
export function encodeResults(results: SyncStoreResults): Uint8Array {
  const parts: Uint8Array[] = [];
  const head = new Uint8Array(4);
  new DataView(head.buffer).setUint32(0, results.length, true);
  parts.push(head);
  for (const r of results) {
    const bytes = r instanceof Uint8Array
      ? r
      : r === null
      ? new Uint8Array(0)
      : new TextEncoder().encode(String(r));
    const h = new Uint8Array(8);
    const v = new DataView(h.buffer);
    v.setInt32(0, r instanceof Uint8Array ? 0 : r === null ? 1 : 2, true);
    v.setUint32(4, bytes.length, true);
    parts.push(h, bytes);
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function decodeResults(bytes: Uint8Array): SyncStoreResults {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = v.getUint32(0, true);
  const out: SyncStoreResults = [];
  let at = 4;
  for (let i = 0; i < n; i++) {
    const kind = v.getInt32(at, true);
    const len = v.getUint32(at + 4, true);
    const data = bytes.slice(at + 8, at + 8 + len);
    at += 8 + len;
    out.push(kind === 0 ? data : kind === 1 ? null : Number(new TextDecoder().decode(data)));
  }
  return out;
}

/** How long the worker may take to start and connect, on top of the calls' own waits. */
const START_SLACK_MS = 30_000;

/**
 * Runs `ops` against the run's control store, in order, and returns their
 * results; this thread waits (it runs no JavaScript meanwhile). Throws when
 * a call fails or the whole takes longer than `timeoutMs` plus a start-up
 * allowance. Only inside a launched rank (the store's address and secret
 * come from the launcher's environment).
 *
 * @example
 * ```ts
 * const [id] = syncStore([{ op: "get", key: storeKey("nccl/1/unique-id"), timeoutMs: 60_000 }], 60_000);
 * ```
 */
export function syncStore(ops: SyncStoreOp[], timeoutMs: number): SyncStoreResults {
  const world = getWorld();
  const token = storeToken();
  if (!world.isLauncher || token === null) {
    throw new Error(
      "No dtrain control store in this process: it was not started by the dtrain launcher " +
        "(start it with `dtrain --nproc N script.ts`)",
    );
  }
  const sab = new SharedArrayBuffer(ANSWER.HEADER_BYTES + ANSWER.MAX_BYTES);
  const state = new Int32Array(sab, 0, 2);
  const worker = new Worker(
    workerModuleUrl("syncStore", new URL("./sync_store_worker.ts", import.meta.url)),
    { type: "module" },
  );
  try {
    const request: SyncStoreRequest = {
      host: world.masterAddr,
      port: world.masterPort,
      token,
      identity: `rank ${world.rank} (synchronous store calls)`,
      ops,
      sab,
    };
    worker.postMessage(request);
    const deadline = Date.now() + timeoutMs + START_SLACK_MS;
    while (Atomics.load(state, ANSWER.STATE) === 0) {
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `the control store did not answer within ${timeoutMs} ms (${
            ops.map((o) => `${o.op} ${o.key}`).join(", ")
          })`,
        );
      }
      Atomics.wait(state, ANSWER.STATE, 0, Math.min(left, 1000));
    }
    const len = Atomics.load(state, ANSWER.LENGTH);
    const bytes = new Uint8Array(sab, ANSWER.HEADER_BYTES, len).slice();
    if (Atomics.load(state, ANSWER.STATE) === 2) throw new Error(new TextDecoder().decode(bytes));
    return decodeResults(bytes);
  } finally {
    worker.terminate();
  }
}
