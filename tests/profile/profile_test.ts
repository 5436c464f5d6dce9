/**
 * DTRAIN_PROFILE=1: a process prints where its start-up and its steps went,
 * by part, on stderr at exit; a launched rank also gets the launcher's and
 * the spawn's share; without the variable nothing is printed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";

const SCRIPT = join(REPO, "tests/profile/scripts/profiled_loop.ts");
const CONFIG = join(REPO, "deno.json");

async function runAlone(env: Record<string, string>, dir: string): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", CONFIG, SCRIPT, "20", join(dir, "ck")],
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const err = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, err);
  return err;
}

/** The "part value (share%)" cells of a steps line, as a map. */
function stepCells(line: string): Map<string, { us: number; pct: number }> {
  const cells = new Map<string, { us: number; pct: number }>();
  for (const m of line.matchAll(/([a-z ]+?) ([\d.]+) \(([\d.]+)%\)/g)) {
    cells.set(m[1]!.trim(), { us: Number(m[2]), pct: Number(m[3]) });
  }
  return cells;
}

Deno.test("DTRAIN_PROFILE=1 breaks a single process's start-up and steps down by part", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-profile-" });
  try {
    const err = await runAlone({ DTRAIN_PROFILE: "1" }, dir);
    const lines = err.split("\n").filter((l) => l.startsWith("[profile]"));
    assert.equal(lines.length, 5, err);
    assert.match(
      lines[0]!,
      /^\[profile\] process start-up, process start → first optimizer step [\d.]+ ms:$/,
    );
    assert.match(lines[1]!, /bootstrap [\d.]+ \| data generation [\d.]+ \|.* first step [\d.]+/);
    // the same stages' CPU time: the parts add up to the total, and no part exceeds its wall time
    // by more than the kernels' threads could (the runtime's start is CPU it spent before its clock)
    const cpu = lines[2]!.match(/^\[profile\] {3}CPU ([\d.]+) ms \(this process\): (.*) \(ms\)$/);
    assert.ok(cpu, lines[2]);
    const cpuCells = new Map(
      cpu[2]!.split(" | ").map((c) => [c.replace(/ [\d.]+$/, ""), Number(c.match(/[\d.]+$/)![0])]),
    );
    assert.ok(cpuCells.has("bootstrap") && cpuCells.has("data generation"), lines[2]);
    assert.ok(!cpuCells.has("launcher load"), "no launcher outside a launch");
    const sum = [...cpuCells.values()].reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum - Number(cpu[1])) < 0.05 * sum + 1, `${sum} vs ${lines[2]}`);
    assert.ok(Number(cpu[1]) > 0, lines[2]);
    const head = lines[3]!.match(
      /^\[profile\] process 19 steps after the first, ([\d.]+) µs per step, CPU ([\d.]+) µs per step:$/,
    );
    assert.ok(head, lines[3]);
    // one thread and nothing to wait for: CPU time is there, and no more than wall time allows
    assert.ok(Number(head[2]) > 0 && Number(head[2]) < 4 * Number(head[1]), lines[3]);
    const cells = stepCells(lines[4]!);
    for (
      const part of ["data wait", "backward", "optimizer", "bookkeeping", "checkpoint", "other"]
    ) {
      assert.ok(cells.has(part), `no "${part}" in ${lines[4]}`);
    }
    assert.ok(!cells.has("reduction wait"), "a single process has no reduction");
    const pct = [...cells.values()].reduce((a, c) => a + c.pct, 0);
    assert.ok(Math.abs(pct - 100) < 1, `shares add up to ${pct}%: ${lines[4]}`);
    // the memory report: 610 parameters in four allocator blocks (2 KiB + 3 × 256 B), as many
    // for their gradients, twice that for AdamW's moments; the rest is the steps' own tensors
    const memory = err.split("\n").filter((l) => l.startsWith("[memory] process, CPU"));
    assert.equal(memory.length, 2, err);
    assert.match(memory[0]!, /peak [\d.]+ KiB live = weights 2\.8 KiB \+ gradients 2\.8 KiB/);
    assert.match(
      memory[1]!,
      /each kind's own peak: weights 2\.8 KiB, gradients 2\.8 KiB, optimizer 5\.5 KiB, activations [\d.]+ [KM]iB, communication 0\.0 KiB$/,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("without DTRAIN_PROFILE nothing is printed", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-profile-" });
  try {
    const err = await runAlone({}, dir);
    assert.ok(!err.includes("[profile]"), err);
    assert.ok(!err.includes("[memory]"), err);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("each launched rank reports the launcher, the spawn, the rendezvous, the DDP set-up and the reduction", async () => {
  const run = new TestRun();
  try {
    const l = run.launch(["--nproc", "2", SCRIPT, "10", join(run.dir, "ck")], {
      env: { DTRAIN_PROFILE: "1" },
    });
    const r = await run.finish(l, 60_000);
    assert.equal(r.code, 0, r.stderr);
    for (const rank of [0, 1]) {
      const mine = r.stderr.split("\n").filter((s) => s.startsWith(`[r${rank}] [profile]`));
      assert.equal(mine.length, 5, r.stderr);
      assert.match(
        mine[0]!,
        new RegExp(`rank ${rank} start-up, launch → first optimizer step [\\d.]+ ms:`),
      );
      assert.match(
        mine[1]!,
        /launcher load [\d.]+ \| launcher set-up [\d.]+ \| spawn [\d.]+ \| bootstrap [\d.]+ \| module load [\d.]+ \| rendezvous [\d.]+ \|/,
      );
      assert.match(mine[1]!, /ddp setup [\d.]+/);
      // the launcher's CPU (passed at spawn) and this rank's, by the same stages
      assert.match(
        mine[2]!,
        /CPU [\d.]+ ms \(launcher \+ this process\): launcher load [\d.]+ \| launcher set-up [\d.]+ \| bootstrap [\d.]+ \| module load [\d.]+ \| rendezvous [\d.]+ \|.*ddp setup [\d.]+/,
      );
      assert.match(mine[3]!, new RegExp(`rank ${rank} 9 steps after the first`));
      assert.ok(stepCells(mine[4]!).has("reduction wait"), mine[4]);
      assert.match(r.stderr, new RegExp(`\\[r${rank}\\] \\[memory\\] rank ${rank}, CPU: peak`));
    }
  } finally {
    await run.cleanup();
  }
});
