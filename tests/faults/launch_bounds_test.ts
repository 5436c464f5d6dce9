/**
 * --nproc is bounded by what the node can run and refused before anything
 * starts; the launcher's spawn loop yields between ranks, so SIGINT/SIGTERM
 * stop a launch at once, at any point, leaving no process behind.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, REPO, TestRun, waitUntil } from "../launch/launch_helpers.ts";
import { checkNproc, NprocLimitError, RANKS_PER_CORE } from "../../launch/nproc_limit.ts";
import { type LaunchOptions, parseLaunchArgs } from "../../launch/options.ts";
import { startAttempt } from "../../launch/attempt.ts";
import { LauncherLog } from "../../launch/output.ts";
import { StoreServer } from "../../distributed/control/store_server.ts";
import { StoreClient } from "../../distributed/control/store.ts";

const HOLD = join(REPO, "tests/faults/scripts/hold.ts");
const CORES = navigator.hardwareConcurrency || 1;

Deno.test("--nproc 10000 is refused at once, before any store, run directory or rank exists", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(t.launch(["--nproc", "10000", HOLD]), 10_000);
    assert.equal(r.code, 2, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(
        `^dtrain: --nproc 10000 is more than a CPU process group takes: at most 256 ranks on one machine`,
      ),
    );
    assert.ok(r.elapsedMs < 8000, `took ${r.elapsedMs} ms`);
    assert.deepEqual([...Deno.readDirSync(t.dir)].map((e) => e.name), ["pids"], "no runs/ folder");
    assert.equal(t.pids().size, 0);
  } finally {
    await t.cleanup();
  }
});

Deno.test("more CPU ranks than a few per core need --oversubscribe, and never more than 256", async () => {
  const t = new TestRun();
  try {
    const many = String(RANKS_PER_CORE * CORES + 1);
    const r = await t.finish(t.launch(["--nproc", many, HOLD]), 10_000);
    assert.equal(r.code, 2, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(
        `--nproc ${many} is more than this machine can run: at most ${
          RANKS_PER_CORE * CORES
        } CPU ranks \\(${RANKS_PER_CORE} per core on ${CORES} core\\(s\\)\\); --oversubscribe allows up to 256`,
      ),
    );
    assert.equal(t.pids().size, 0);
  } finally {
    await t.cleanup();
  }
  const cpu = { device: "cpu" as const, cores: 2, oversubscribe: true };
  assert.doesNotThrow(() => checkNproc(256, cpu));
  assert.throws(() => checkNproc(257, cpu), NprocLimitError);
  assert.doesNotThrow(() => checkNproc(8, { ...cpu, oversubscribe: false }));
  assert.throws(() => checkNproc(9, { ...cpu, oversubscribe: false }), /at most 8 CPU ranks/);
  const gpu = { device: "cuda" as const, cores: 64, gpus: 8, oversubscribe: true };
  assert.doesNotThrow(() => checkNproc(8, gpu));
  assert.throws(
    () => checkNproc(9, gpu),
    /--nproc 9 is more than the 8 GPU\(s\) visible on this machine.*one rank per GPU.*use --nproc 8 or --device cpu/,
  );
});

Deno.test("a signal during the spawn loop stops it between two ranks", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-spawn-loop-" });
  const token = "spawn-loop-test-token-0123456789";
  const server = StoreServer.listen({ hostname: "127.0.0.1", port: 0, token, log: () => {} });
  const client = await StoreClient.connect({ host: "127.0.0.1", port: server.port, token });
  const nproc = 64;
  const opts = parseLaunchArgs(
    ["--nproc", String(nproc), "--oversubscribe", "--grace", "1", HOLD],
    () => undefined,
  ) as LaunchOptions;
  const lines: string[] = [];
  const log = new LauncherLog("[test-launcher]");
  log.info = (m: string) => lines.push(m);
  const started = () => [...Deno.readDirSync(dir)].filter((e) => /^rank-\d+\.log$/.test(e.name));
  try {
    const handle = startAttempt({
      opts,
      client,
      log,
      runId: `spawnloop-${Deno.pid}`,
      runDir: dir,
      token,
      masterPort: server.port,
      threads: 1,
      v8Flags: [],
      script: HOLD,
    }, 0);
    // Timers interleave with the loop only if it yields: signal as soon as the first rank exists.
    await new Promise<void>((resolve) => {
      const poll = () => started().length > 0 ? resolve() : setTimeout(poll, 0);
      poll();
    });
    handle.signal("SIGTERM");
    const result = await handle.result;
    assert.equal(result.ok, false);
    const count = started().length;
    assert.ok(count < nproc / 4, `${count} of ${nproc} ranks were started after the signal`);
    assert.match(lines.join("\n"), /received SIGTERM: forwarding it to the ranks/);
    assert.match(lines.join("\n"), new RegExp(`node 0's ranks ended: rank 0 `));
  } finally {
    client.close();
    await server.close();
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("SIGTERM right after a launch starts ends it within seconds with 143 and no rank left", async () => {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "8", "--oversubscribe", "--grace", "1", HOLD]);
    await waitUntil(() => /logs in/.test(l.stderr()), 20_000, "the run started");
    const t0 = performance.now();
    Deno.kill(l.pid, "SIGTERM");
    const r = await t.finish(l, 20_000);
    const ms = performance.now() - t0;
    assert.equal(r.code, 143, r.stderr);
    assert.ok(ms < 6000, `the launcher took ${ms} ms after SIGTERM`);
    for (const pid of t.pids().values()) assert.ok(!alive(pid), `rank ${pid} is alive`);
  } finally {
    await t.cleanup();
  }
});
