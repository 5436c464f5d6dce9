/**
 * The worker behind distributed/control/sync_store.ts: connects to the
 * control store, runs the requested calls in order, writes their results
 * (or the error) into the shared buffer and wakes the waiting thread.
 */
import { StoreClient } from "./store.ts";
import {
  ANSWER,
  encodeResults,
  type SyncStoreRequest,
  type SyncStoreResults,
} from "./sync_store.ts";

/** How long the connection may take (node 0's store is up by the time ranks run). */
const CONNECT_TIMEOUT_MS = 20_000;

function answer(sab: SharedArrayBuffer, state: number, bytes: Uint8Array): void {
  const head = new Int32Array(sab, 0, 2);
  const room = Math.min(bytes.length, ANSWER.MAX_BYTES);
  new Uint8Array(sab, ANSWER.HEADER_BYTES, room).set(bytes.subarray(0, room));
  Atomics.store(head, ANSWER.LENGTH, room);
  Atomics.store(head, ANSWER.STATE, state);
  Atomics.notify(head, ANSWER.STATE);
}

async function run(req: SyncStoreRequest): Promise<void> {
  let client: StoreClient | null = null;
  try {
    client = await StoreClient.connect({
      host: req.host,
      port: req.port,
      token: req.token,
      timeoutMs: CONNECT_TIMEOUT_MS,
      identity: req.identity,
    });
    const results: SyncStoreResults = [];
    for (const op of req.ops) {
      if (op.op === "set") {
        await client.set(op.key, op.value);
        results.push(null);
      } else if (op.op === "add") {
        results.push(await client.add(op.key, op.amount));
      } else {
        results.push(
          await client.get(op.key, op.timeoutMs === undefined ? {} : { timeoutMs: op.timeoutMs }),
        );
      }
    }
    const bytes = encodeResults(results);
    if (bytes.length > ANSWER.MAX_BYTES) throw new Error(`store answers of ${bytes.length} bytes`);
    answer(req.sab, 1, bytes);
  } catch (e) {
    answer(req.sab, 2, new TextEncoder().encode((e as Error).message));
  } finally {
    client?.close();
  }
}

/** This module runs as a worker: its global scope receives the request. */
const worker = self as unknown as {
  onmessage: ((e: MessageEvent<SyncStoreRequest>) => void) | null;
  close(): void;
};
worker.onmessage = (e) => {
  run(e.data).finally(() => worker.close());
};
