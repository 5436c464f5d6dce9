/**
 * The control store's semantics over real loopback TCP: authentication
 * (refused and logged without the token), set/get/wait/add/delete/list,
 * timeouts, pipelining, concurrent clients and the end of a connection.
 */
import assert from "node:assert/strict";
import { StoreClient, StoreError } from "../../../distributed/control/store.ts";
import { StoreServer, type StoreServerOptions } from "../../../distributed/control/store_server.ts";
import { encodeFrame, Op } from "../../../distributed/control/store_protocol.ts";

const TOKEN = "test-token-0123456789abcdef";

async function withStore(
  fn: (
    ctx: { server: StoreServer; logs: string[]; connect: (token?: string) => Promise<StoreClient> },
  ) => Promise<void>,
  opts: Partial<StoreServerOptions> = {},
): Promise<void> {
  const logs: string[] = [];
  const server = StoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    token: TOKEN,
    log: (l) => logs.push(l),
    ...opts,
  });
  const clients: StoreClient[] = [];
  const connect = async (token = TOKEN) => {
    const c = await StoreClient.connect({
      host: "127.0.0.1",
      port: server.port,
      token,
      timeoutMs: 2000,
      identity: "test",
    });
    clients.push(c);
    return c;
  };
  try {
    await fn({ server, logs, connect });
  } finally {
    for (const c of clients) c.close();
    await server.close();
  }
}

/** Resolves once the store has closed a raw connection (read returns null or fails). */
async function readUntilClosed(conn: Deno.Conn): Promise<Uint8Array> {
  const chunks: number[] = [];
  const buf = new Uint8Array(4096);
  for (;;) {
    let n: number | null;
    try {
      n = await conn.read(buf);
    } catch {
      n = null;
    }
    if (n === null) break;
    chunks.push(...buf.subarray(0, n));
  }
  conn.close();
  return new Uint8Array(chunks);
}

Deno.test("StoreClient.connect() is refused with a wrong token, and the store logs it", async () => {
  await withStore(async ({ connect, logs }) => {
    await assert.rejects(connect("wrong-token"), (e: unknown) => {
      assert.ok(e instanceof StoreError);
      assert.equal(e.kind, "refused");
      assert.match(e.message, /wrong token/);
      return true;
    });
    assert.equal(logs.length, 1);
    assert.match(
      logs[0]!,
      /^store: refused connection from 127\.0\.0\.1:\d+: wrong token \(client says it is "test"\)/,
    );
    assert.ok(!logs[0]!.includes(TOKEN), "the log must not contain the secret");
  });
});

Deno.test("StoreServer closes a connection whose first frame is not AUTH, and logs it", async () => {
  await withStore(async ({ server, logs, connect }) => {
    const raw = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    await raw.write(encodeFrame(Op.SET, 1, [{ str: "k" }, { str: "stolen" }]));
    const answer = await readUntilClosed(raw);
    assert.match(
      new TextDecoder().decode(answer),
      /store refused the connection: first frame is op 2, expected AUTH/,
    );
    assert.equal(logs.length, 1);
    assert.match(logs[0]!, /refused connection from .*first frame is op 2/);
    // The unauthenticated SET must not have reached the store.
    const c = await connect();
    assert.equal(await c.get("k"), null);
  });
});

Deno.test("StoreServer drops a connection that does not authenticate in time", async () => {
  await withStore(async ({ server, logs }) => {
    const raw = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    const t0 = performance.now();
    await readUntilClosed(raw);
    const waited = performance.now() - t0;
    assert.ok(waited >= 150 && waited < 3000, `closed after ${waited} ms, expected ~200 ms`);
    assert.match(logs.join("\n"), /no authentication within 200 ms/);
  }, { authTimeoutMs: 200 });
});

Deno.test("StoreClient set/get/add/delete/list keep their documented semantics", async () => {
  await withStore(async ({ connect }) => {
    const a = await connect();
    const b = await connect();
    assert.equal(await a.get("missing"), null);
    await a.set("text", "héllo");
    await a.set("bytes", new Uint8Array([0, 255, 7]));
    assert.equal(await b.getText("text"), "héllo");
    assert.deepEqual(await b.get("bytes"), new Uint8Array([0, 255, 7]));
    await b.set("text", "overwritten");
    assert.equal(await a.getText("text"), "overwritten");

    assert.equal(await a.add("n", 5), 5);
    assert.equal(await b.add("n", -7), -2);
    assert.equal(await a.getText("n"), "-2", "counters are stored as decimal text");
    await assert.rejects(a.add("text", 1), /Cannot add to key "text": its value is not an integer/);
    await assert.rejects(a.add("n", 2 ** 60), /not a safe integer/);
    assert.equal(
      await a.getText("text"),
      "overwritten",
      "a failed add leaves the connection usable",
    );

    assert.equal(await a.delete("n"), true);
    assert.equal(await a.delete("n"), false);
    assert.equal(await b.get("n"), null);
    assert.equal(await b.add("n", 1), 1, "a deleted counter restarts from 0");

    await a.set("p/1", "x");
    await a.set("p/2", "yy");
    await a.set("q/1", "z");
    const listed = (await b.list("p/")).map((e) => [e.key, new TextDecoder().decode(e.value)])
      .sort();
    assert.deepEqual(listed, [["p/1", "x"], ["p/2", "yy"]]);
    const [entry] = await b.list("q/");
    assert.ok(entry && entry.ageMs >= 0 && entry.ageMs < 5000);
  });
});

Deno.test("StoreClient.wait() resolves when keys appear and times out naming the missing ones", async () => {
  await withStore(async ({ connect }) => {
    const a = await connect();
    const b = await connect();
    await a.set("k1", "1");
    await a.wait(["k1"], 0); // present keys need no waiting, even with a zero timeout
    const waiting = b.wait(["k1", "k2", "k3"], 5000);
    let done = false;
    waiting.then(() => done = true);
    await a.set("k2", "2");
    await a.ping();
    assert.equal(done, false, "wait() must not resolve before every key exists");
    await a.set("k3", "3");
    await waiting;

    const t0 = performance.now();
    await assert.rejects(b.wait(["k1", "never-a", "never-b"], 150), (e: unknown) => {
      assert.ok(e instanceof StoreError);
      assert.equal(e.kind, "timeout");
      assert.deepEqual(e.missingKeys, ["never-a", "never-b"]);
      assert.match(
        e.message,
        /Timed out after 150 ms waiting for store keys: missing "never-a", "never-b"/,
      );
      return true;
    });
    const took = performance.now() - t0;
    assert.ok(took >= 140 && took < 2000, `timed out after ${took} ms`);
    await assert.rejects(b.wait(["never-a"], 0), /missing "never-a"/);
  });
});

Deno.test("StoreClient.get() with timeoutMs waits for the key, then throws a timeout", async () => {
  await withStore(async ({ connect }) => {
    const a = await connect();
    const b = await connect();
    const later = b.getText("late", { timeoutMs: 5000 });
    await a.set("late", "arrived");
    assert.equal(await later, "arrived");
    await assert.rejects(b.get("absent", { timeoutMs: 100 }), (e: unknown) => {
      return e instanceof StoreError && e.kind === "timeout" &&
        /store key "absent"/.test(e.message);
    });
    assert.equal(await b.get("absent", { timeoutMs: 0 }), null);
  });
});

Deno.test("StoreClient pipelines requests: a blocked wait does not hold up later calls", async () => {
  await withStore(async ({ connect }) => {
    const a = await connect();
    const blocked = a.wait(["gate"], 5000);
    // Answers to later requests on the same connection arrive while the wait is pending.
    const results = await Promise.all([
      a.add("c", 1),
      a.add("c", 1),
      a.getText("c"),
      a.set("x", "1"),
    ]);
    assert.deepEqual(results.slice(0, 2), [1, 2]);
    await a.set("gate", "open");
    await blocked;
  });
});

Deno.test("StoreServer serves concurrent clients with atomic add", async () => {
  await withStore(async ({ connect }) => {
    const clients = await Promise.all(Array.from({ length: 8 }, () => connect()));
    const seen = await Promise.all(
      clients.map((c) => Promise.all(Array.from({ length: 50 }, () => c.add("ctr", 1)))),
    );
    const all = seen.flat().sort((x, y) => x - y);
    assert.deepEqual(
      all,
      Array.from({ length: 400 }, (_, i) => i + 1),
      "each add returns a distinct count",
    );
    assert.equal(await clients[0]!.getText("ctr"), "400");
  });
});

Deno.test("StoreClient.closed reports the store going away and fails pending calls", async () => {
  const server = StoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    token: TOKEN,
    log: () => {},
  });
  const c = await StoreClient.connect({
    host: "127.0.0.1",
    port: server.port,
    token: TOKEN,
    timeoutMs: 2000,
  });
  try {
    const pending = c.wait(["never"]);
    await server.close();
    const info = await c.closed;
    assert.equal(info.byClient, false);
    await assert.rejects(pending, (e: unknown) => e instanceof StoreError && e.kind === "closed");
    await assert.rejects(
      c.set("k", "v"),
      (e: unknown) => e instanceof StoreError && e.kind === "closed",
    );
  } finally {
    c.close();
  }
});

Deno.test("StoreClient.connect() retries until the store starts, then gives up at its deadline", async () => {
  // Find a free port, then start the store on it only after the client began retrying.
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (probe.addr as Deno.NetAddr).port;
  probe.close();
  const connecting = StoreClient.connect({
    host: "127.0.0.1",
    port,
    token: TOKEN,
    timeoutMs: 5000,
  });
  await new Promise((r) => setTimeout(r, 300));
  const server = StoreServer.listen({ hostname: "127.0.0.1", port, token: TOKEN, log: () => {} });
  try {
    const c = await connecting;
    await c.set("k", "v");
    c.close();
  } finally {
    await server.close();
  }
  await assert.rejects(
    StoreClient.connect({ host: "127.0.0.1", port, token: TOKEN, timeoutMs: 300 }),
    (e: unknown) =>
      e instanceof StoreError && e.kind === "connect" && /within 300 ms/.test(e.message),
  );
});

Deno.test("StoreServer refuses writes beyond its capacity with a clear error", async () => {
  await withStore(async ({ connect }) => {
    const a = await connect();
    await a.set("small", "x".repeat(100));
    await assert.rejects(
      a.set("big", new Uint8Array(2000)),
      /Cannot set key "big": the store is full/,
    );
    await a.delete("small");
    await a.set("big", new Uint8Array(900));
  }, { maxStoredBytes: 1024 });
});
