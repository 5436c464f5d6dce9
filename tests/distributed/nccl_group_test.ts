/**
 * The NCCL process group on the emulated GPU, several rank processes each,
 * through the NCCL stand-in built with AddressSanitizer (libasan preloaded
 * into the rank's Deno), so a communicator aborted or destroyed twice, or
 * used after it was freed, is a reported failure: every collective's values
 * (device memory and host arrays, overlapped reductions that wait on the GPU
 * only), the start timing out and aborting, a bad argument aborting this
 * rank's communicator once and failing the peer, a dead peer and a stalled
 * peer stopping every other rank within its timeout, close() after an abort.
 * Each rank also reports that no communicator is left unfreed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { BUILD_DIR, buildNative } from "../../scripts/build_native.ts";
import { StoreServer } from "../../distributed/control/store_server.ts";
import { launcherEnv, uniqueRunId } from "./scripts/_ranks.ts";

import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const SCRIPT = join(ROOT, "tests", "distributed", "scripts", "nccl_rank.ts");

/** The stand-in with AddressSanitizer and the libasan to preload, or null where g++ cannot build it. */
function asanStandIn(): { lib: string; preload: string } | null {
  buildNative({ quiet: true });
  const asan = new Deno.Command("g++", { args: ["-print-file-name=libasan.so"], stdout: "piped" })
    .outputSync();
  const preload = new TextDecoder().decode(asan.stdout).trim();
  if (!asan.success || !preload.startsWith("/")) return null;
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-nccl-asan-" });
  addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
  const lib = join(dir, "libdtrain_nccl_emu_asan.so");
  const r = new Deno.Command("g++", {
    args: [
      "-std=gnu++20",
      "-O1",
      "-g",
      "-fPIC",
      "-shared",
      "-pthread",
      "-fsanitize=address",
      "-fno-omit-frame-pointer",
      "-DDT_NCCL_EMU_ASAN",
      `-I${ROOT}kernels/cuda_emu/include`,
      `-Wl,--version-script=${ROOT}kernels/nccl_emu/nccl_emu.map`,
      `${ROOT}kernels/nccl_emu/nccl_emu.cpp`,
      `-L${BUILD_DIR}`,
      "-ldtrain_shm",
      "-ldtrain_cudart_emu",
      `-Wl,-rpath,${BUILD_DIR}`,
      "-o",
      lib,
    ],
    stderr: "piped",
  }).outputSync();
  if (!r.success) assert.fail(`g++ nccl_emu.cpp (ASan): ${new TextDecoder().decode(r.stderr)}`);
  return { lib, preload };
}

const asan = HAVE_EMU ? asanStandIn() : null;

interface RankResult {
  rank: number;
  code: number;
  records: Record<string, unknown>[];
  stderr: string;
}

/** Runs `ranks` of a `world`-rank job of nccl_rank.ts `args` against a store of this test; kills leftovers. */
async function runRanks(
  world: number,
  args: string[],
  opts: { ranks?: number[]; timeoutS?: number } = {},
): Promise<RankResult[]> {
  const token = crypto.randomUUID();
  const store = StoreServer.listen({ hostname: "127.0.0.1", port: 0, token, log: () => {} });
  const runId = uniqueRunId("nccl");
  const children: { rank: number; child: Deno.ChildProcess }[] = [];
  try {
    for (const rank of opts.ranks ?? Array.from({ length: world }, (_, r) => r)) {
      const env: Record<string, string> = {
        ...launcherEnv(rank, world, runId),
        MASTER_PORT: String(store.port),
        DTRAIN_STORE_TOKEN: token,
        DTRAIN_TIMEOUT: String(opts.timeoutS ?? 60),
        DTRAIN_CUDA_EMU_SMS: "1",
      };
      if (asan) {
        Object.assign(env, {
          LD_PRELOAD: asan.preload,
          // Deno itself is not instrumented: its allocations at exit are not ours to report
          ASAN_OPTIONS: "detect_leaks=0:abort_on_error=0:exitcode=99",
          DTRAIN_NCCL_EMU_LIB: asan.lib,
        });
      }
      const child = new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--config", join(ROOT, "deno.json"), SCRIPT, ...args],
        env,
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      children.push({ rank, child });
    }
    return await Promise.all(children.map(async ({ rank, child }) => {
      const out = await child.output();
      const text = new TextDecoder().decode(out.stdout);
      const records = text.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
      return { rank, code: out.code, records, stderr: new TextDecoder().decode(out.stderr) };
    }));
  } finally {
    for (const { child } of children) {
      try {
        child.kill("SIGKILL");
      } catch { /* exited */ }
    }
    await store.close();
  }
}

function record(r: RankResult, event: string, name?: string): Record<string, unknown> {
  const found = r.records.find((x) => x.event === event && (name === undefined || x.name === name));
  assert.ok(
    found,
    `rank ${r.rank}: no ${event} ${name ?? ""} record; stdout ${
      JSON.stringify(r.records)
    }; stderr ${r.stderr}`,
  );
  return found;
}

/** No AddressSanitizer report, and the stand-in freed every communicator (exactly once: ASan). */
function clean(r: RankResult): void {
  assert.doesNotMatch(r.stderr, /AddressSanitizer/, `rank ${r.rank}: ${r.stderr}`);
  assert.equal(record(r, "closed").live, 0, `rank ${r.rank} left a communicator unfreed`);
}

/** Names in /dev/shm of the stand-in's segments that a rank process left behind. */
function leftSegments(): string[] {
  return [...Deno.readDirSync("/dev/shm")].map((e) => e.name).filter((n) =>
    n.startsWith("dtrain-nccl-")
  );
}

Deno.test({
  name: "NCCL group on the emulated GPU: every collective's values, overlap without host waits",
  ignore: !HAVE_EMU,
  async fn() {
    const results = await runRanks(3, ["collectives"]);
    for (const r of results) {
      assert.equal(r.code, 0, `rank ${r.rank}: ${r.stderr}`);
      assert.deepEqual(record(r, "group"), {
        event: "group",
        rank: r.rank,
        backend: "nccl",
        size: 3,
      });
      assert.deepEqual(record(r, "result", "allReduce sum").values, [6, 12, 18]);
      assert.deepEqual(record(r, "result", "allReduce max").values, [2, 0]);
      assert.deepEqual(record(r, "result", "allReduce avg host").values, [1.5]);
      assert.deepEqual(record(r, "result", "broadcast").values, [20, 21]);
      assert.deepEqual(record(r, "result", "allGather").values, [0, 100, 1, 101, 2, 102]);
      assert.deepEqual(record(r, "result", "reduceScatter").values, [
        3 * 2 * r.rank,
        3 * (2 * r.rank + 1),
      ]);
      const overlap = record(r, "result", "allReduceStart x3");
      assert.deepEqual(overlap.values, [2, 4, 6]); // avg of k * (1, 2, 3)
      assert.equal(
        overlap.hostWaitsBeforeRead,
        0,
        "starting and waiting for reductions made the host wait",
      );
      assert.equal(
        overlap.deviceWaitsBeforeRead,
        0,
        "the emulated device saw the host wait for it",
      );
      clean(r);
    }
  },
});

Deno.test({
  name:
    "NCCL group: a bad argument aborts that rank's communicator once; the peer fails; close() after is safe",
  ignore: !HAVE_EMU,
  async fn() {
    const [r0, r1] = await runRanks(2, ["bad-argument"], { timeoutS: 60 });
    for (const r of [r0!, r1!]) assert.equal(r.code, 0, `rank ${r.rank}: ${r.stderr}`);
    const own = r0!.records.filter((x) => x.event === "error");
    assert.match(
      String(own[0]?.message),
      /broadcast: root 7 is not a rank of this group \(size 2\)/,
    );
    assert.match(
      String(own[1]?.message),
      /the NCCL process group failed: rank 0 called broadcast #1 with bad arguments/,
    );
    const peer = record(r1!, "error");
    assert.match(String(peer.message), /NCCL process group failed/);
    assert.ok(Number(peer.ms) < 30_000, `the peer took ${peer.ms} ms to fail (timeout 60 s)`);
    clean(r0!);
    clean(r1!);
  },
});

Deno.test({
  name:
    "NCCL group: a rank that dies stops every other rank within the timeout (async error, abort once)",
  ignore: !HAVE_EMU,
  async fn() {
    const results = await runRanks(3, ["peer-dies"], { timeoutS: 60 });
    const dead = results[2]!;
    assert.equal(dead.code, 3);
    for (const r of results.slice(0, 2)) {
      assert.equal(r.code, 0, `rank ${r.rank}: ${r.stderr}`);
      const e = record(r, "error");
      assert.match(
        String(e.message),
        /allReduce #2 .* failed: NCCL reported|the communicator was aborted/,
      );
      assert.equal(
        e.kind,
        "peer",
        `a dead peer is a consequence, not rank ${r.rank}'s own failure`,
      );
      assert.ok(Number(e.ms) < 30_000, `rank ${r.rank} took ${e.ms} ms (timeout 60 s)`);
      clean(r);
    }
  },
});

Deno.test({
  name:
    "NCCL group: a peer that never arrives is aborted at the deadline by the watchdog, naming the call",
  ignore: !HAVE_EMU,
  async fn() {
    const results = await runRanks(2, ["stalled-peer", "3000", "9000"], { timeoutS: 60 });
    const [r0, r1] = results as [RankResult, RankResult];
    assert.equal(r0.code, 0, r0.stderr);
    const e = record(r0, "error");
    assert.match(
      String(e.message),
      /allReduce #1 \(64 bytes\) on rank 0 of 2 timed out after 3000 ms/,
    );
    assert.equal(e.kind, "timeout");
    assert.ok(Number(e.ms) >= 2900 && Number(e.ms) < 20_000, `aborted after ${e.ms} ms`);
    // the late rank finds its peers gone
    assert.equal(r1.code, 0, r1.stderr);
    assert.match(String(record(r1, "error").message), /NCCL|failed|aborted/);
    clean(r0);
    clean(r1);
  },
});

Deno.test({
  name:
    "NCCL group: a start that times out aborts the communicator and says how many ranks arrived",
  ignore: !HAVE_EMU,
  async fn() {
    const before = new Set(leftSegments());
    const [r0] = await runRanks(2, ["init-timeout", "2000"], { ranks: [0] });
    assert.equal(r0!.code, 0, r0!.stderr);
    const e = record(r0!, "error");
    assert.match(
      String(e.message),
      /NCCL communicator start on rank 0 of 2 did not finish within 2000 ms \(1 of 2 ranks reached it\); the communicator was aborted/,
    );
    assert.equal(e.kind, "timeout");
    clean(r0!);
    assert.deepEqual(leftSegments().filter((n) => !before.has(n)), []);
  },
});

Deno.test({
  name:
    "NCCL group: a script that never closes its group still ends (the watchdog keeps nothing alive)",
  ignore: !HAVE_EMU,
  async fn() {
    const t0 = Date.now();
    const results = await runRanks(2, ["no-close"]);
    for (const r of results) {
      assert.equal(r.code, 0, `rank ${r.rank}: ${r.stderr}`);
      assert.deepEqual(record(r, "result", "sum").values, [1]);
      assert.doesNotMatch(r.stderr, /AddressSanitizer/);
    }
    assert.ok(Date.now() - t0 < 60_000, `the ranks took ${Date.now() - t0} ms to end`);
  },
});
