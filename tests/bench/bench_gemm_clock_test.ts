// bench_gemm's --clock cpu: on a loaded machine each library is timed by the calling thread's CPU
// clock, which must count the thread's own work and nothing of the time it spends off a core.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { threadCpuClock } from "../../scripts/bench_gemm.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

Deno.test("bench_gemm's thread CPU clock stands still while the thread sleeps and runs while it works", () => {
  const clock = threadCpuClock();
  // asleep for 300 ms: a wall clock would advance by at least that much
  const t0 = clock();
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 300);
  const asleep = clock() - t0;
  assert.ok(
    asleep >= 0 && asleep < 0.1,
    `the CPU clock advanced ${asleep} s during a 300 ms sleep`,
  );
  // busy for 100 ms of wall time: some of it on a core, however loaded the machine is
  const t1 = clock(), end = performance.now() + 100;
  let spins = 0;
  while (performance.now() < end) spins++;
  const busy = clock() - t1;
  assert.ok(busy > 0 && spins > 0, `the CPU clock advanced ${busy} s during 100 ms of work`);
});

Deno.test("bench_gemm refuses an unknown --clock by name", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "scripts/bench_gemm.ts", "--clock", "sundial"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stderr);
  assert.notEqual(out.code, 0);
  assert.match(text, /--clock must be wall or cpu, not "sundial"/);
});
