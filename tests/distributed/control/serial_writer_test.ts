/**
 * The store connection's SerialWriter: frames leave in order, and a record
 * posted again for the same key while the previous one still waits replaces
 * it — so a rank that runs collectives in a loop without ever yielding to the
 * event loop (each one publishing its state) holds one pending record, not
 * one per collective (its memory grew by ~10 MB/s before).
 */
import assert from "node:assert/strict";
import { SerialWriter } from "../../../distributed/control/store_protocol.ts";

/** A connection whose writes complete only when the test lets them. */
function heldConn() {
  const written: string[] = [];
  const pending: (() => void)[] = [];
  const conn = {
    write(b: Uint8Array): Promise<number> {
      return new Promise((resolve) =>
        pending.push(() => {
          written.push(new TextDecoder().decode(b));
          resolve(b.length);
        })
      );
    },
  } as unknown as Deno.Conn;
  /** Completes writes until none is pending (each completion may start the next write). */
  const release = async () => {
    while (pending.length > 0) {
      pending.shift()!();
      await new Promise((r) => setTimeout(r, 0));
    }
  };
  return { conn, written, release };
}

const frame = (s: string) => new TextEncoder().encode(s);

Deno.test("SerialWriter keeps one pending frame per superseding key, however often it is sent", async () => {
  const { conn, written, release } = heldConn();
  const w = new SerialWriter(conn);
  // The first frame starts writing at once; the rest wait behind it without an event-loop turn.
  for (let i = 0; i < 10_000; i++) w.post(frame(`rank-0=${i}`), "rank-0");
  assert.equal(w.queuedBytes, frame("rank-0=0").length + frame("rank-0=9999").length);
  await release();
  await w.flushed();
  assert.deepEqual(written, ["rank-0=0", "rank-0=9999"]);
});

Deno.test("SerialWriter never replaces a frame of another key, a plain frame, or the one being written", async () => {
  const { conn, written, release } = heldConn();
  const w = new SerialWriter(conn);
  w.post(frame("a=1"), "a"); // being written
  w.post(frame("a=2"), "a"); // queued
  void w.send(frame("GET a")); // a request: never superseded, and a later post queues after it
  w.post(frame("a=3"), "a");
  w.post(frame("b=1"), "b");
  w.post(frame("a=4"), "a"); // the tail is b's: a=4 queues behind it
  w.post(frame("a=5"), "a"); // replaces a=4
  await release();
  await w.flushed();
  assert.deepEqual(written, ["a=1", "a=2", "GET a", "a=3", "b=1", "a=5"]);
});
