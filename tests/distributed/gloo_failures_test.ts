/**
 * How the Gloo process group fails, on simulated nodes of this machine: a
 * rank that never arrives (a timeout naming it and its node), a rank killed
 * or closed mid-job (peers fail within seconds, naming the cause), a bad
 * argument and mismatched calls (both sides reported on every rank), a rank
 * that never joins (the rendezvous, in the first collective, names it), and a process outside the run
 * that takes a rank's Gloo connection (refused, with its address, and
 * logged). Every rank process is killed when its test ends.
 */
import assert from "node:assert/strict";
import { StoreClient } from "../../distributed/control/store.ts";
import type { RankProcess } from "./scripts/_ranks.ts";
import { type GlooJob, withGlooRanks } from "./scripts/_gloo_ranks.ts";
import { GLOO_MISSING } from "../launch/gloo_helpers.ts";

const DT_ERR_ARG = 1, DT_ERR_TIMEOUT = 7, DT_ERR_SYS = 8;

type Outcome = { ok: boolean; error?: string; status?: number; ms: number };

async function ready(procs: RankProcess[]): Promise<void> {
  for (const p of procs) {
    const r = await p.next("ready", "init-failed");
    assert.equal(r.event, "ready", `rank ${p.rank} could not join: ${r.error}`);
    assert.equal(r.backend, "gloo");
  }
}

/** Runs a first barrier on every rank: the group forms in its first collective. */
async function formed(procs: RankProcess[]): Promise<void> {
  for (const p of procs) await p.send("barrier formed 30000");
  for (const p of procs) {
    const r = await p.next("done");
    assert.equal(r.ok, true, `rank ${p.rank} could not form the group: ${r.error}`);
  }
}

async function run(p: RankProcess, line: string): Promise<Outcome> {
  await p.send(line);
  return (await p.next("done")) as unknown as Outcome;
}

function serve(nodes: number, tag: string, env: Record<string, string> = {}): GlooJob {
  return { nodes, perNode: 1, tag, args: ["serve"], env: () => env };
}

Deno.test({
  name: "Gloo barrier() returns on no rank before the last rank has entered it",
  ignore: GLOO_MISSING !== null,
}, async () => {
  await withGlooRanks(serve(3, "gbarrier"), async (procs) => {
    await ready(procs);
    const [r0, r1, r2] = procs as [RankProcess, RankProcess, RankProcess];
    for (const p of [r0, r1]) {
      await p.send("barrier epoch-end 30000");
      await p.next("enter");
    }
    assert.equal(r0.has("done") || r1.has("done"), false, "a rank left before rank 2 entered");
    await r2.send("barrier epoch-end 30000");
    for (const p of procs) {
      const done = await p.next("done");
      assert.equal(done.ok, true, String(done.error));
    }
  });
});

Deno.test({
  name:
    "Gloo allReduce times out naming the rank and node that never arrived; the peer then fails at once",
  ignore: GLOO_MISSING !== null,
}, async () => {
  await withGlooRanks(serve(2, "gtimeout"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    await formed([r0!, r1!]);
    const res = await run(r0!, "allreduce 10 f32 800");
    assert.equal(res.ok, false);
    assert.equal(res.status, DT_ERR_TIMEOUT);
    assert.match(
      res.error!,
      /#2 allReduce\(sum, 10 x f32\) timed out on rank 0 \(node 0\) after 800 ms: rank 1 \(node 1\) has not arrived/,
    );
    assert.ok(res.ms >= 790 && res.ms < 5000, `timed out after ${res.ms} ms, expected about 800`);
    const late = await run(r1!, "barrier late 30000");
    assert.equal(late.ok, false);
    assert.match(late.error!, /rank 0 \(node 0\) aborted the process group: .*timed out/);
    assert.ok(late.ms < 5000, `rank 1 waited ${late.ms} ms`);
  });
});

Deno.test({
  name:
    "a Gloo rank SIGKILLed mid-job: the survivor's collective fails within seconds, saying the peer is gone",
  ignore: GLOO_MISSING !== null,
}, async () => {
  await withGlooRanks(serve(2, "gkill"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    for (const p of [r0!, r1!]) await p.send("allreduce 1000 f32 30000");
    for (const p of [r0!, r1!]) assert.equal((await p.next("done")).ok, true);
    await r0!.send("allreduce 100000 f32 30000");
    await r0!.next("enter");
    await r1!.kill();
    const res = (await r0!.next("done")) as unknown as Outcome;
    assert.equal(res.ok, false);
    assert.equal(res.status, DT_ERR_SYS);
    assert.match(
      res.error!,
      /#2 allReduce\(sum, 100000 x f32\) on rank 0 \(node 0\) cannot complete: lost its connection to a peer \(gloo: .*\): that peer's process exited or was killed/,
    );
    // no launcher here: the survivor waits 3 s for a launcher's abort record before it says so
    assert.ok(res.ms < 5000, `noticed after ${res.ms} ms, expected well before the 30 s timeout`);
  });
});

Deno.test({
  name:
    "a bad argument on one Gloo rank makes its peer's collective fail at once with that rank's error",
  ignore: GLOO_MISSING !== null,
}, async () => {
  await withGlooRanks(serve(2, "gbadarg"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    // mid-job: the group has formed
    await formed([r0!, r1!]);
    const bad = await run(r0!, "broadcast 10 5 30000");
    assert.equal(bad.ok, false);
    assert.match(bad.error!, /broadcast: root 5 is not a rank of this group \(size 2\)/);
    const peer = await run(r1!, "broadcast 10 0 30000");
    assert.equal(peer.ok, false);
    assert.match(
      peer.error!,
      /rank 0 \(node 0\) aborted the process group: rank 0 called broadcast #2 with bad arguments/,
    );
    assert.ok(peer.ms < 5000, `rank 1 waited ${peer.ms} ms`);
  });
  await withGlooRanks(serve(2, "gbadfirst"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    // in the very first call, while the group forms: the bad rank joins, then aborts
    await r0!.send("broadcast 10 5 30000");
    await r1!.send("broadcast 10 0 30000");
    const [bad, peer] = [await r0!.next("done"), await r1!.next("done")];
    assert.equal(bad.ok, false);
    assert.equal(peer.ok, false);
    assert.match(
      String(peer.error),
      /rank 0 \(node 0\) aborted the process group: rank 0 called broadcast #1 with bad arguments/,
    );
    assert.ok(Number(peer.ms) < 5000, `rank 1 waited ${peer.ms} ms`);
  });
});

Deno.test({
  name:
    "ranks that close right after a last barrier never fail a peer still finishing it (8 rounds)",
  ignore: GLOO_MISSING !== null,
}, async () => {
  for (let round = 0; round < 8; round++) {
    await withGlooRanks(serve(3, `glast${round}`), async (procs) => {
      await ready(procs);
      for (const p of procs) await p.send("barrier last 30000");
      for (const p of procs) await p.send("close");
      for (const p of procs) {
        const barrier = await p.next("done");
        assert.equal(barrier.ok, true, `round ${round}, rank ${p.rank}: ${barrier.error}`);
        const close = await p.next("done");
        assert.equal(close.ok, true, `round ${round}, rank ${p.rank} close: ${close.error}`);
      }
    });
  }
});

Deno.test({
  name: "close() on one Gloo rank makes a peer's collective fail at once, naming it",
  ignore: GLOO_MISSING !== null,
}, async () => {
  await withGlooRanks(serve(2, "gclose"), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    await formed([r0!, r1!]);
    assert.equal((await run(r1!, "close")).ok, true);
    const res = await run(r0!, "allreduce 10 f32 30000");
    assert.equal(res.ok, false);
    assert.match(res.error!, /rank 1 \(node 1\) closed its process group/);
    assert.ok(res.ms < 5000, `noticed after ${res.ms} ms`);
  });
});

async function mismatch(
  env: Record<string, string>,
  line0: string,
  line1: string,
): Promise<[Outcome, Outcome]> {
  return await withGlooRanks(serve(2, "gmismatch", env), async ([r0, r1]) => {
    await ready([r0!, r1!]);
    await r0!.send(line0);
    await r1!.send(line1);
    return [
      (await r0!.next("done")) as unknown as Outcome,
      (await r1!.next("done")) as unknown as Outcome,
    ];
  });
}

Deno.test({
  name:
    "Gloo: allReduce of 10 floats on rank 0 and 12 on rank 1 is reported on both ranks with both calls",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const [a, b] = await mismatch({}, "allreduce 10 f32 10000", "allreduce 12 f32 10000");
  for (const [res, me, other] of [[a, "10", "12"], [b, "12", "10"]] as const) {
    assert.equal(res.ok, false);
    assert.equal(res.status, DT_ERR_ARG);
    assert.match(
      res.error!,
      new RegExp(
        `Collective mismatch at #1: rank \\d \\(node \\d\\) called allReduce\\(sum, ${me} x f32\\) but rank \\d \\(node \\d\\) called #1 allReduce\\(sum, ${other} x f32\\)`,
      ),
    );
  }
});

Deno.test({
  name: "Gloo: dtypes and barrier names are compared only under DTRAIN_DISTRIBUTED_DEBUG=DETAIL",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const [a, b] = await mismatch({}, "allreduce 10 f32 10000", "allreduce 10 i32 10000");
  assert.deepEqual([a.ok, b.ok], [true, true], "op and size match: only DETAIL compares dtypes");
  const [c, d] = await mismatch(
    { DTRAIN_DISTRIBUTED_DEBUG: "DETAIL" },
    "barrier epoch-end 10000",
    "barrier after-scan 10000",
  );
  for (const res of [c, d]) {
    assert.equal(res.ok, false);
    assert.match(res.error!, /barrier\("epoch-end"\)/);
    assert.match(res.error!, /barrier\("after-scan"\)/);
  }
  const [e, f] = await mismatch({}, "broadcast 10 0 10000", "allreduce 10 f32 10000");
  for (const res of [e, f]) {
    assert.match(res.error!, /broadcast\(root 0, 10 x f32\)/);
    assert.match(res.error!, /allReduce\(sum, 10 x f32\)/);
  }
});

Deno.test({
  name: "a Gloo rendezvous without rank 1 times out naming it and its node",
  ignore: GLOO_MISSING !== null,
}, async () => {
  const job = { ...serve(2, "gnorank1"), ranks: [0] };
  await withGlooRanks(job, async ([r0]) => {
    await ready([r0!]); // initProcessGroup() only checks the settings: the group forms in the first call
    const r = await run(r0!, "barrier first 1000");
    assert.equal(r.ok, false);
    assert.equal(r.status, DT_ERR_TIMEOUT);
    assert.match(
      String(r.error),
      /Gloo rendezvous timed out on rank 0 \(node 0\) after 1000 ms: rank 1 \(node 1\) did not join/,
    );
    assert.ok(r.ms < 6000, `gave up after ${r.ms} ms`);
  });
});

/** The listening address rank `member` published for its pair with the other member (IPv4). */
function publishedAddress(raw: Uint8Array): { hostname: string; port: number } {
  // Gloo's tcp::Address: a sockaddr_storage (family, port big-endian, IPv4 address) then a sequence number
  const family = raw[0]! | (raw[1]! << 8);
  assert.equal(family, 2, "an IPv4 address");
  return { hostname: `${raw[4]}.${raw[5]}.${raw[6]}.${raw[7]}`, port: (raw[2]! << 8) | raw[3]! };
}

function preamble(opcode: number, slot: bigint, length: number, withData: boolean): Uint8Array {
  const b = new DataView(new ArrayBuffer(48));
  b.setBigUint64(0, BigInt(48 + (withData ? length : 0)), true); // bytes of this message
  b.setBigUint64(8, BigInt(opcode), true);
  b.setBigUint64(16, slot, true);
  b.setBigUint64(32, BigInt(length), true);
  return new Uint8Array(b.buffer);
}

Deno.test({
  name:
    "a process outside the run that takes a rank's Gloo connection is refused, named by its address, and logged",
  ignore: GLOO_MISSING !== null,
}, async () => {
  // Rank 0 binds 127.0.0.1 and rank 1 127.0.0.2, so rank 0 is the side that accepts (Gloo's
  // rule: the lower address listens). An outsider that learned rank 0's port (here from the
  // store; in life by scanning) connects first and answers like Gloo, with a made-up proof.
  const job: GlooJob = {
    ...serve(2, "gimpostor"),
    ranks: [0],
    env: (r) => ({ DTRAIN_GLOO_HOST: r === 0 ? "127.0.0.1" : "127.0.0.2" }),
  };
  await withGlooRanks(job, async ([r0], ctx) => {
    await ready([r0!]);
    await r0!.send("barrier first 20000"); // the group forms in its first call
    const store = await StoreClient.connect({
      host: "127.0.0.1",
      port: ctx.store.port,
      token: ctx.token,
    });
    let conn: Deno.TcpConn | null = null;
    try {
      const raw = await store.get("dtrain/a0/user/gloo/1/world/0", { timeoutMs: 15_000 });
      conn = await Deno.connect(publishedAddress(raw!));
      const r1 = ctx.start(1); // joins only now: rank 0's port is taken
      await ready([r1]);
      await r1.send("barrier first 20000");
      // Rank 0 asks for the proof (NOTIFY_RECV_READY, opcode 3); send a wrong one.
      const head = new Uint8Array(48);
      for (;;) {
        let got = 0;
        while (got < 48) got += (await conn.read(head.subarray(got)))!;
        const v = new DataView(head.buffer);
        if (v.getBigUint64(8, true) === 3n) {
          const slot = v.getBigUint64(16, true);
          await conn.write(preamble(2, slot, 32, false)); // NOTIFY_SEND_READY
          await conn.write(preamble(1, slot, 32, true)); // SEND_UNBOUND_BUFFER
          await conn.write(new Uint8Array(32).fill(7));
          break;
        }
      }
      const local = conn.localAddr as Deno.NetAddr;
      const r = await r0!.next("done");
      assert.equal(r.ok, false);
      assert.match(
        String(r.error),
        new RegExp(
          `rank 0 \\(node 0\\) refused the Gloo connection from 127\\.0\\.0\\.1:${local.port} that claimed to be ` +
            `rank 1 \\(node 1\\): it did not prove it holds this run's token`,
        ),
      );
      // the real rank 1 found its connection taken and failed too, rather than joining
      const r1Result = await r1.next("done");
      assert.equal(r1Result.ok, false);
      assert.match(
        String(r1Result.error),
        /Gloo rendezvous failed on rank 1 \(node 1\).*Connection refused/,
      );
      await r0!.kill();
      assert.match(
        await r0!.stderr(),
        /\[dtrain\] rank 0 \(node 0\) refused the Gloo connection from 127\.0\.0\.1/,
      );
    } finally {
      conn?.close();
      store.close();
    }
  });
});
