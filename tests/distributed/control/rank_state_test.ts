/**
 * What ranks publish: the phase sink writes each phase change and collective
 * enter/exit to the store, and a launcher reads it back as a RankView whose
 * durations survive clock differences between machines.
 */
import assert from "node:assert/strict";
import {
  StorePhaseSink,
  toFailureNotice,
  toRankView,
} from "../../../distributed/control/rank_state.ts";
import { StoreClient } from "../../../distributed/control/store.ts";
import { StoreServer } from "../../../distributed/control/store_server.ts";
import {
  readStatePage,
  StatePage,
  statePagePath,
} from "../../../distributed/control/state_page.ts";

const TOKEN = "rank-state-test-token";

Deno.test("StorePhaseSink publishes phases and collectives that toRankView() reads back", async () => {
  const server = StoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    token: TOKEN,
    log: () => {},
  });
  const rank = await StoreClient.connect({ host: "127.0.0.1", port: server.port, token: TOKEN });
  const launcher = await StoreClient.connect({
    host: "127.0.0.1",
    port: server.port,
    token: TOKEN,
  });
  try {
    const sink = new StorePhaseSink(rank, "r/2", {
      rank: 2,
      host: "hostA",
      pid: 77,
      phase: "start",
      phaseAt: Date.now(),
    });
    sink.phase("forward", Date.now() - 1500);
    // A barrier's enter leaves at once (other collectives within ~100 ms).
    sink.collective({ seq: 7, op: "barrier", bytes: 0, detail: "epoch-end" }, "enter");
    await rank.ping(); // posted records are ordered before this answer
    const [entry] = await launcher.list("r/");
    const v = toRankView(entry!)!;
    assert.equal(v.rank, 2);
    assert.equal(v.host, "hostA");
    assert.equal(v.pid, 77);
    assert.equal(v.phase, "forward");
    assert.ok(v.phaseS >= 1.5 && v.phaseS < 3, `in phase for ${v.phaseS} s`);
    assert.deepEqual(v.coll, { seq: 7, op: "barrier", bytes: 0, detail: "epoch-end" });
    assert.equal(v.inColl, true);
    assert.equal(v.status, "running");

    sink.collective({ seq: 7, op: "barrier", bytes: 0, detail: "epoch-end" }, "exit");
    sink.exiting();
    await rank.ping();
    const after = toRankView((await launcher.list("r/"))[0]!)!;
    assert.equal(after.inColl, false);
    assert.equal(after.status, "exited");
  } finally {
    rank.close();
    launcher.close();
    await server.close();
  }
});

Deno.test("StorePhaseSink writes every collective enter and exit to its state page at once", async () => {
  const server = StoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    token: TOKEN,
    log: () => {},
  });
  const rank = await StoreClient.connect({ host: "127.0.0.1", port: server.port, token: TOKEN });
  const dir = Deno.makeTempDirSync();
  const path = statePagePath(dir, 1);
  const page = StatePage.open(path)!;
  try {
    const sink = new StorePhaseSink(rank, "r/1", {
      rank: 1,
      host: "h",
      pid: 5,
      phase: "start",
      phaseAt: Date.now(),
    }, page);
    sink.publish();
    // Frequent collectives reach the store only within ~100 ms (a timer); the page at once, with
    // no event-loop turn in between.
    for (let seq = 1; seq <= 5; seq++) {
      sink.collective({ seq, op: "allReduce", bytes: 64 }, "enter");
      sink.collective({ seq, op: "allReduce", bytes: 64 }, "exit");
    }
    sink.collective({ seq: 6, op: "allReduce", bytes: 64 }, "enter");
    const v = toRankView({ key: "", ...readStatePage(path)! })!;
    assert.deepEqual(v.coll, { seq: 6, op: "allReduce", bytes: 64 });
    assert.equal(v.inColl, true);
    assert.equal(v.rank, 1);
    assert.equal(v.pid, 5);
  } finally {
    page.close();
    rank.close();
    await server.close();
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("toRankView() measures time on the rank's clock plus the record's age", () => {
  // The rank's clock is an hour ahead; the record was written 4 s ago by the store's clock.
  const skew = 3_600_000;
  const now = Date.now() + skew;
  const record = {
    rank: 0,
    host: "h",
    pid: 1,
    phase: "scan",
    phaseAt: now - 6000,
    coll: null,
    inColl: false,
    collAt: 0,
    status: "running",
    sentAt: now,
  };
  const v = toRankView({
    key: "k",
    value: new TextEncoder().encode(JSON.stringify(record)),
    ageMs: 4000,
  })!;
  assert.equal(v.phaseS, 10);
  assert.equal(v.heardS, 4);
});

Deno.test("toRankView() and toFailureNotice() return null for records that are not theirs", () => {
  const enc = (s: string) => new TextEncoder().encode(s);
  for (const bad of ["not json", "42", "{}", '{"rank":"0"}']) {
    assert.equal(toRankView({ key: "k", value: enc(bad), ageMs: 0 }), null, bad);
    assert.equal(toFailureNotice(enc(bad)), null, bad);
  }
  assert.equal(toFailureNotice(null), null);
  // A notice without the newer fields reads as the rank's own error at an unknown time.
  assert.deepEqual(toFailureNotice(enc('{"rank":1,"host":"h","message":"m","stack":"s"}')), {
    rank: 1,
    host: "h",
    pid: 0,
    kind: "error",
    at: 0,
    message: "m",
    stack: "s",
  });
  const full = {
    rank: 2,
    host: "h",
    pid: 9,
    kind: "peer",
    at: 5,
    message: "m",
    stack: "",
    collective: { seq: 3, op: "allReduce" },
  };
  assert.deepEqual(toFailureNotice(enc(JSON.stringify(full))), full);
  assert.equal(toFailureNotice(enc(JSON.stringify({ ...full, kind: "bogus" })))!.kind, "error");
});

Deno.test("StorePhaseSink's records are the RankState it describes, field for field, as its pieces change", () => {
  const posts: string[] = [];
  const store = {
    post: (_key: string, json: string) => posts.push(json),
  } as unknown as StoreClient;
  const t0 = Date.now();
  const sink = new StorePhaseSink(store, "r/0", {
    rank: 3,
    host: 'host "q" é',
    pid: 42,
    phase: "start",
    phaseAt: t0,
  });
  // what each record must say: the fields the sink was given, at the times it stamped
  const expect: Record<string, unknown> = {
    rank: 3,
    host: 'host "q" é',
    pid: 42,
    phase: "start",
    phaseAt: t0,
    coll: null,
    inColl: false,
    status: "running",
  };
  const check = (what: string) => {
    const got = JSON.parse(posts.at(-1)!);
    // the record's and the collective's times are the sink's own clock: only checked as times
    assert.deepEqual({ ...got, sentAt: 0, collAt: 0 }, { ...expect, sentAt: 0, collAt: 0 }, what);
    assert.ok(got.sentAt >= t0 && (expect.coll === null ? got.collAt === 0 : got.collAt >= t0));
  };
  sink.publish();
  check("the first record");
  sink.phase('scan "data"\n', t0 + 1);
  Object.assign(expect, { phase: 'scan "data"\n', phaseAt: t0 + 1, phaseFrequent: false });
  check("a user's phase");
  sink.collective({ seq: 1, op: "barrier", bytes: 0, detail: 'epoch "1"' }, "enter");
  expect.coll = { seq: 1, op: "barrier", bytes: 0, detail: 'epoch "1"' };
  expect.inColl = true;
  check("a barrier's enter");
  sink.phase("forward", t0 + 2, true);
  sink.collective({ seq: 2, op: "allReduce", bytes: 4096 }, "enter");
  sink.collective({ seq: 2, op: "allReduce", bytes: 4096 }, "exit");
  sink.publish();
  Object.assign(expect, {
    phase: "forward",
    phaseAt: t0 + 2,
    phaseFrequent: true,
    coll: { seq: 2, op: "allReduce", bytes: 4096 },
    inColl: false,
  });
  check("a frequent phase and a collective without detail, after one with");
  sink.collective({ seq: 3, op: "allReduce", bytes: 8, detail: "x" }, "enter");
  sink.exiting();
  Object.assign(expect, {
    coll: { seq: 3, op: "allReduce", bytes: 8, detail: "x" },
    inColl: false,
    status: "exited",
  });
  check("the exit");
  const v = toRankView({ key: "", value: new TextEncoder().encode(posts.at(-1)!), ageMs: 0 })!;
  assert.equal(v.status, "exited");
  assert.deepEqual(v.coll, { seq: 3, op: "allReduce", bytes: 8, detail: "x" });
});
