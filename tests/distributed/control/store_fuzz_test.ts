/**
 * Fuzzes the control store: a seeded generator sends thousands of random,
 * malformed and oversized frames, before and after authentication, over many
 * connections at once. The store must only ever close the offending
 * connection (never hit an internal error) and keep serving a well-behaved
 * client afterwards.
 */
import assert from "node:assert/strict";
import { StoreClient } from "../../../distributed/control/store.ts";
import { StoreServer } from "../../../distributed/control/store_server.ts";
import {
  encodeFrame,
  type Field,
  MAX_AUTH_FRAME_BYTES,
  MAX_FRAME_BYTES,
  MAX_KEY_BYTES,
  MAX_WAIT_KEYS,
  NO_REPLY,
  Op,
} from "../../../distributed/control/store_protocol.ts";

const TOKEN = "fuzz-token-fedcba9876543210";
const SEED = Number(Deno.env.get("DTRAIN_FUZZ_SEED") ?? "20251129");

/** mulberry32: a small seeded generator, so a failure can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function header(len: number, code: number, id: number): Uint8Array {
  const b = new Uint8Array(9);
  const v = new DataView(b.buffer);
  v.setUint32(0, len, true);
  v.setUint8(4, code);
  v.setUint32(5, id, true);
  return b;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** One generated frame (or byte soup), labelled by the kind of damage. */
function generate(rand: () => number): Uint8Array {
  const int = (n: number) => Math.floor(rand() * n);
  const bytes = (n: number) => Uint8Array.from({ length: n }, () => int(256));
  const key = (): Field => rand() < 0.9 ? { str: `k${int(20)}` } : { bytes: bytes(int(8)) };
  const ops = [
    Op.AUTH,
    Op.SET,
    Op.SET | NO_REPLY,
    Op.GET,
    Op.WAIT,
    Op.ADD,
    Op.DELETE,
    Op.LIST,
    Op.PING,
  ];
  const op = rand() < 0.9 ? ops[int(ops.length)]! : int(256);
  const id = int(2 ** 32);
  // Half the frames are well-formed, so a connection usually gets past a few
  // before a damaged one closes it.
  switch (rand() < 0.5 ? 10 : int(10)) {
    case 0: // pure garbage
      return bytes(1 + int(64));
    case 1: // declared length far beyond every limit
      return concat(header(MAX_FRAME_BYTES + 1 + int(2 ** 31), op, id), bytes(int(32)));
    case 2: // declared length below the minimum
      return concat(header(int(5), op, id), bytes(int(8)));
    case 3: // length prefix of a huge key
      return encodeFrame(op, id, [{ u32: MAX_KEY_BYTES + 1 + int(2 ** 30) }]);
    case 4: // too many wait keys
      return encodeFrame(Op.WAIT, id, [{ u32: MAX_WAIT_KEYS + 1 + int(1000) }]);
    case 5: // truncated body
      return encodeFrame(op, id, [{ u32: 10 + int(100) }, { bytes: bytes(int(4)) }]);
    case 6: // trailing bytes after a valid body
      return encodeFrame(Op.DELETE, id, [key(), { bytes: bytes(1 + int(8)) }]);
    case 7: // invalid UTF-8 in a key
      return encodeFrame(Op.GET, id, [{ bytes: new Uint8Array([0xff, 0xfe, 0x80]) }, { u32: 0 }]);
    case 8: // a big value before authentication (over the pre-auth limit)
      return encodeFrame(Op.AUTH, id, [{ bytes: bytes(MAX_AUTH_FRAME_BYTES + int(1000)) }, {
        str: "x",
      }]);
    case 9: // random fields after a random op
      return encodeFrame(
        op,
        id,
        Array.from(
          { length: int(5) },
          (): Field => rand() < 0.5 ? { u32: int(2 ** 32) } : { bytes: bytes(int(16)) },
        ),
      );
    default: { // well-formed requests (some wait briefly), to mix valid traffic in
      const t = int(3) * 20;
      const valid: Field[][] = [
        [key(), { bytes: bytes(int(32)) }],
        [key(), { u32: t }],
        [{ u32: 2 }, key(), key(), { u32: t }],
        [key(), { i64: BigInt(int(100) - 50) }],
        [key()],
        [{ str: "k" }],
        [],
      ];
      const which = [Op.SET, Op.GET, Op.WAIT, Op.ADD, Op.DELETE, Op.LIST, Op.PING][int(7)]!;
      const fields =
        valid[[Op.SET, Op.GET, Op.WAIT, Op.ADD, Op.DELETE, Op.LIST, Op.PING].indexOf(which)]!;
      return encodeFrame(which, id, fields);
    }
  }
}

/** Opens a raw connection, maybe authenticates, sends frames, drains answers, closes. */
async function fuzzConnection(port: number, rand: () => number, frames: number): Promise<number> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const drain = (async () => {
    const buf = new Uint8Array(65536);
    try {
      while (await conn.read(buf) !== null) { /* discard answers */ }
    } catch { /* closed by the store or by us */ }
  })();
  let sent = 0;
  try {
    if (rand() < 0.6) {
      await conn.write(
        encodeFrame(Op.AUTH, 1, [{ str: rand() < 0.9 ? TOKEN : "nope" }, { str: "fuzz" }]),
      );
    }
    for (let i = 0; i < frames; i++) {
      const frame = generate(rand);
      // Sometimes split a frame across writes, or stop halfway through one.
      const cut = rand() < 0.2 ? Math.floor(rand() * frame.length) : frame.length;
      await conn.write(frame.subarray(0, cut));
      sent++;
      if (cut < frame.length) {
        if (rand() < 0.5) break;
        await conn.write(frame.subarray(cut));
      }
    }
  } catch {
    // The store closed this connection: expected after a malformed frame.
  }
  try {
    conn.closeWrite();
  } catch { /* already closed */ }
  await Promise.race([drain, new Promise((r) => setTimeout(r, 200))]);
  try {
    conn.close();
  } catch { /* already closed */ }
  await drain;
  return sent;
}

Deno.test("StoreServer survives thousands of random, malformed and oversized frames and keeps serving", async () => {
  const logs: string[] = [];
  const server = StoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    token: TOKEN,
    log: (l) => logs.push(l),
    refusalIntervalMs: 0, // a line per refused connection, to count them
  });
  const rand = rng(SEED);
  let sent = 0;
  try {
    const connections = 1500;
    const parallel = 8;
    for (let i = 0; i < connections; i += parallel) {
      const batch = Array.from(
        { length: parallel },
        () =>
          fuzzConnection(
            server.port,
            rng(Math.floor(rand() * 2 ** 32)),
            2 + Math.floor(rand() * 20),
          ),
      );
      for (const n of await Promise.all(batch)) sent += n;
    }
    assert.ok(sent >= 4000, `only ${sent} frames were sent`);
    assert.ok(logs.length >= 1000, `only ${logs.length} connections were refused or closed`);
    const internal = logs.filter((l) =>
      l.includes("internal error") || l.includes("connection error")
    );
    assert.deepEqual(internal, [], `the store hit unexpected errors (seed ${SEED})`);
    assert.ok(logs.some((l) => /malformed frame/.test(l)), "malformed frames must be logged");
    assert.ok(
      logs.some((l) => /refused connection/.test(l)),
      "unauthenticated frames must be logged",
    );

    const client = await StoreClient.connect({
      host: "127.0.0.1",
      port: server.port,
      token: TOKEN,
      timeoutMs: 2000,
    });
    try {
      await client.set("after-fuzz", "still serving");
      assert.equal(await client.getText("after-fuzz"), "still serving");
      const base = await client.add("fuzz-counter", 0);
      assert.equal(await client.add("fuzz-counter", 3), base + 3);
      await client.wait(["after-fuzz"], 1000);
    } finally {
      client.close();
    }
  } finally {
    await server.close();
  }
});
