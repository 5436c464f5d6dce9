/**
 * The emulated device's sanitizers on planted bugs: tests/cuda/emu_sanitize_probe.cu
 * (test-only kernels) is compiled with the sanitizer build's instrumentation and
 * run per scenario. racecheck (DTRAIN_EMU_RACECHECK=1) must name the kernel,
 * the shared-memory byte and both threads of a missing __syncthreads or
 * __syncwarp; memcheck (DTRAIN_EMU_MEMCHECK=1) must name the kernel of a read
 * past, or a write before, a device allocation, and of dynamic shared memory
 * indexed past the launch's size; clean kernels (barriers, __syncwarp,
 * shuffles, atomics) must pass under both; and racecheck's seeded thread
 * order must show a result that depends on the order threads run in.
 */
import assert from "node:assert/strict";
import { emuProbe } from "./_emu_probe.ts";
import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do

const probePath = () => emuProbe("emu_sanitize_probe.cu", { sanitize: true });
const plainProbePath = () => emuProbe("emu_sanitize_probe.cu");

/** The probe's stdout line and stderr for `scenario` under `env` (it must exit 0). */
function run(
  scenario: string,
  env: Record<string, string>,
  probe = probePath(),
): { out: string; err: string } {
  const r = new Deno.Command(probe, {
    args: [scenario],
    clearEnv: true,
    env,
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  const out = new TextDecoder().decode(r.stdout).trim();
  const err = new TextDecoder().decode(r.stderr);
  assert.equal(r.code, 0, `${scenario}: exit ${r.code}: ${out} ${err}`);
  return { out, err };
}

const RACE = { DTRAIN_EMU_RACECHECK: "1" };
const MEM = { DTRAIN_EMU_MEMCHECK: "1" };
const BOTH = { ...RACE, ...MEM };

const test = (name: string, fn: () => void) => Deno.test({ name, ignore: !HAVE_EMU, fn });

test("racecheck names the kernel, the byte and both threads of a missing __syncthreads", () => {
  const { out, err } = run("race-barrier", RACE);
  assert.match(
    out,
    /^launch failed: .*kernel planted_race_missing_barrier launched at emu_sanitize_probe\.cu/,
  );
  assert.match(
    out,
    /racecheck: (write|read) of 4 bytes at byte \d+ of static shared memory .* races with a (read|write) of byte \d+ by thread \(\d+,0,0\) of the same block/,
  );
  // printed as it is found, too (a run whose error text is swallowed still shows it)
  assert.match(err, /kernel planted_race_missing_barrier .*racecheck:/);
  // without racecheck the same kernel passes: the finding is racecheck's
  assert.equal(run("race-barrier", {}).out, "ok race-barrier");
});

test("racecheck: lanes of one warp need __syncwarp (or a shuffle or vote) between them", () => {
  const { out } = run("race-syncwarp", RACE);
  assert.match(out, /kernel planted_race_missing_syncwarp .*racecheck: .*by thread \(\d+,0,0\)/);
});

test("racecheck: a shared slot rewritten while other threads may still read it", () => {
  const { out } = run("race-reused-slot", RACE);
  assert.match(out, /kernel planted_race_reused_slot .*racecheck: /);
});

test("memcheck names the kernel of a read past the end of a device allocation", () => {
  const { out, err } = run("oob-read", MEM);
  assert.match(
    out,
    /kernel planted_oob_read .*thread \(100,0,0\): memcheck: read of 4 bytes .* 0 bytes past the end of a 400-byte allocation/,
  );
  assert.match(err, /kernel planted_oob_read .*memcheck:/);
  assert.equal(run("oob-read", {}).out, "ok oob-read");
});

test("memcheck: a write before the start of an allocation, and dynamic shared memory past its size", () => {
  assert.match(
    run("oob-write", MEM).out,
    /kernel planted_oob_write .*memcheck: write of 4 bytes .* 4 bytes before the start of a 1024-byte allocation/,
  );
  assert.match(
    run("oob-shared", MEM).out,
    /kernel planted_oob_shared .*memcheck: write of 4 bytes at byte 256 of dynamic shared memory runs past its end \(256 bytes\)/,
  );
});

test("barriers, __syncwarp, shuffles and atomics pass under both sanitizers", () => {
  // 2 blocks of 2 warps; lane values t*2 after the exchange: sum over t^1 of 0..63 twice = 4032
  assert.equal(run("clean", BOTH).out, "ok clean warp total 4032");
});

test("racecheck runs a block's threads in a seeded order: order-dependent results change", () => {
  const last = (env: Record<string, string>) => Number(run("order", env).out.split(" ").at(-1));
  // in index order the last thread's exchange survives
  assert.equal(last({}), 255);
  const seen = new Set(
    [1, 2, 3, 4].map((seed) => last({ ...RACE, DTRAIN_EMU_RACECHECK_SEED: `${seed}` })),
  );
  assert.ok(seen.size > 1, `four seeds gave one order: ${[...seen]}`);
  // the same seed gives the same order
  assert.equal(
    last({ ...RACE, DTRAIN_EMU_RACECHECK_SEED: "7" }),
    last({ ...RACE, DTRAIN_EMU_RACECHECK_SEED: "7" }),
  );
});

test("either sanitizer refuses kernels built without the instrumentation, rather than pass unchecked", () => {
  for (
    const [name, env] of [["DTRAIN_EMU_RACECHECK", RACE], ["DTRAIN_EMU_MEMCHECK", MEM]] as const
  ) {
    const { out } = run("clean", env, plainProbePath());
    assert.match(
      out,
      new RegExp(
        `launch failed: .*${name}=1, but the kernels were built without the sanitizer's instrumentation`,
      ),
    );
  }
});
