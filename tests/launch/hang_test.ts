/**
 * Hang diagnosis, on the original report's case: rank 0 scans a large
 * directory under phase("scan dataset") while the other ranks wait at a
 * store barrier. Past --hang-warn the launcher prints, once, the table and
 * names rank 0 as elsewhere; past --timeout it fails cleanly with the table.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { alive, SCRIPTS, TestRun } from "./launch_helpers.ts";

const SCAN_HANG = join(SCRIPTS, "scan_hang.ts");

function makeDataset(dir: string, files: number): string {
  const data = join(dir, "dataset");
  Deno.mkdirSync(data);
  for (let i = 0; i < files; i++) {
    Deno.writeFileSync(join(data, `sample-${i}.bin`), new Uint8Array(i % 7));
  }
  return data;
}

Deno.test("--hang-warn prints once which ranks wait at the barrier and that rank 0 is scanning", async () => {
  const t = new TestRun();
  try {
    const data = makeDataset(t.dir, 3000);
    const r = await t.finish(
      t.launch(["--nproc", "3", "--hang-warn", "1", SCAN_HANG, data, "2.5"]),
    );
    assert.equal(r.code, 0, r.stderr);
    const hangs = r.stderr.split("\n").filter((l) => l.startsWith("[dtrain] hang: "));
    assert.equal(hangs.length, 1, `the hang is reported once:\n${r.stderr}`);
    assert.match(
      hangs[0]!,
      /^\[dtrain\] hang: ranks 1,2 wait at barrier "after-scan" \(seq 1\) for [\d.]+ s; rank 0 is elsewhere: phase "scan dataset" for [\d.]+ s$/,
    );
    assert.match(
      r.stderr,
      /^\[dtrain\] rank\s+node\s+host\s+pid\s+state\s+phase\s+in phase\s+last collective\s+heard$/m,
    );
    assert.match(
      r.stderr,
      /^\[dtrain\] 0\s+0\s+\S+\s+\d+\s+running\s+scan dataset\s+[\d.]+ s\s+-/m,
    );
    assert.match(
      r.stderr,
      /^\[dtrain\] 1\s+0\s+\S+\s+\d+\s+running\s+barrier "after-scan"\s+[\d.]+ s\s+barrier "after-scan" \(seq 1\) waiting/m,
    );
    assert.match(
      r.stdout,
      /^\[r0\] rank 0 passed the barrier$/m,
      "the run completes after the scan",
    );
  } finally {
    await t.cleanup();
  }
});

Deno.test("--timeout turns the hang into a clean failure that prints the table", async () => {
  const t = new TestRun();
  try {
    const data = makeDataset(t.dir, 3000);
    // 5 s: well past the 3 s after which a rank whose heartbeat stopped is called not responding
    // (SILENT_S), so a loaded machine's late heartbeat cannot put rank 0 on either side of it
    const l = t.launch(["--nproc", "3", "--timeout", "5", SCAN_HANG, data, "60"]);
    await t.ranksStarted(3);
    const t0 = performance.now();
    const r = await t.finish(l);
    const took = performance.now() - t0;
    assert.equal(r.code, 124, r.stderr);
    assert.ok(
      took >= 4500 && took < 15000,
      `the launcher ended ${took} ms after the ranks started`,
    );
    assert.match(
      r.stderr,
      /timeout: a collective waited [\d.]+ s \(--timeout 5 s\); stopping every rank/,
    );
    assert.match(
      r.stderr,
      /ranks 1,2 wait at barrier "after-scan" \(seq 1\) for [\d.]+ s; rank 0 is elsewhere: phase "scan dataset"/,
    );
    // Rank 0 scans synchronously: its heartbeat stops, and the table says so.
    assert.match(
      r.stderr,
      /^\[dtrain\] 0\s+0\s+\S+\s+\d+\s+not responding \(running code\)\s+scan dataset/m,
    );
    assert.ok(
      !r.stderr.includes("[dtrain] hang: "),
      "with the default --hang-warn 60 only the timeout prints",
    );
    for (const pid of t.pids().values()) {
      assert.ok(!alive(pid), `rank process ${pid} survived the timeout`);
    }
  } finally {
    await t.cleanup();
  }
});
