// The toy DDP benchmark's per-rank CPU figures (examples/toy_ddp.ts under DTRAIN_BENCH=1, read by
// scripts/bench_ddp.ts): every rank reports what its main thread and its whole process spent on a
// core per steady step, figures a loaded machine cannot inflate the way it inflates wall time.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { parseBenchOutput } from "../../scripts/bench_ddp.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

Deno.test("every toy DDP rank reports its CPU per steady step, no more than the step's wall time", async () => {
  const runDir = Deno.makeTempDirSync({ prefix: "dtrain-toy-bench-" });
  try {
    const out = await new Deno.Command(`${ROOT}/dtrain`, {
      args: [
        "--nproc",
        "2",
        "--threads",
        "1",
        "--log-ranks",
        "all",
        "--run-dir",
        runDir,
        "examples/toy_ddp.ts",
        "1", // one epoch
      ],
      cwd: ROOT,
      env: { DTRAIN_BENCH: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, text + new TextDecoder().decode(out.stderr));
    const { r0, cpu } = parseBenchOutput(text, "ss_samples_per_s");
    assert.equal(cpu.length, 2, text);
    // 2 ranks x 64 samples a step: the steady step's wall time on the ranks' shared clock
    const wallUs = (128 / r0.ss_samples_per_s!) * 1e6;
    for (const [rank, c] of cpu.entries()) {
      assert.ok(c.main > 0, `rank ${rank}: main thread ${c.main} µs per step`);
      assert.ok(c.process >= c.main, `rank ${rank}: process ${c.process} < main ${c.main}`);
      // one thread cannot be on a core longer than the wall clock ran (µs, not ns or ms)
      assert.ok(
        c.main <= wallUs * 1.05,
        `rank ${rank}: ${c.main} µs of CPU in a ${wallUs} µs step`,
      );
    }
  } finally {
    Deno.removeSync(runDir, { recursive: true });
  }
});

Deno.test("the toy DDP benchmark's output parser takes rank 0's rate and every rank's CPU in rank order", () => {
  const text = [
    '[r1] BENCH {"rank":1,"ss_samples_per_s":9,"cpu_main_us_per_step":5,"cpu_process_us_per_step":6}',
    '[r0] BENCH {"rank":0,"ss_samples_per_s":10,"cpu_main_us_per_step":3,"cpu_process_us_per_step":4}',
  ].join("\n");
  const { r0, cpu } = parseBenchOutput(text, "ss_samples_per_s");
  assert.equal(r0.ss_samples_per_s, 10);
  assert.deepEqual(cpu, [{ main: 3, process: 4 }, { main: 5, process: 6 }]);
  // a line without a rank (the GPT workload's) is rank 0's, and brings no CPU figures
  const gpt = parseBenchOutput('BENCH {"tokens_per_s":7}', "tokens_per_s");
  assert.deepEqual([gpt.r0.tokens_per_s, gpt.cpu], [7, []]);
  assert.throws(
    () => parseBenchOutput("nothing", "tokens_per_s"),
    /no BENCH line with tokens_per_s/,
  );
});
