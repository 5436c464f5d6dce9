/**
 * Every real kernel under the emulated device's sanitizers: the op sweep of
 * the device check (scripts/gpu_check/ops_vs_cpu.ts, every op of the kernel
 * ABI at the emulated sizes) run as CI runs it on cuda-emu, with racecheck
 * and memcheck both on, must pass every case with no finding. The planted
 * bugs that prove the checkers catch what they should are in
 * tests/cuda/emu_sanitize_test.ts.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do

const ROOT = new URL("../../", import.meta.url).pathname;

Deno.test({
  name: "the op sweep on cuda-emu passes under racecheck and memcheck, every symbol covered",
  ignore: !HAVE_EMU,
  fn() {
    buildNative({ quiet: true, parts: ["cuda-emu", "cuda-emu-sanitize"] });
    const r = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--config", `${ROOT}deno.json`, `${ROOT}scripts/gpu_check/ops_vs_cpu.ts`],
      env: { DTRAIN_DEVICE: "cuda-emu", DTRAIN_EMU_RACECHECK: "1", DTRAIN_EMU_MEMCHECK: "1" },
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    const out = new TextDecoder().decode(r.stdout), err = new TextDecoder().decode(r.stderr);
    const failures = out.split("\n").filter((l) => / FAIL /.test(l) || l.startsWith("SUMMARY"));
    assert.equal(r.code, 0, `${failures.join("\n")}\n${err.slice(-4000)}`);
    assert.match(out, /SUMMARY \d+ checks, 0 failed, (\d+)\/\1 symbols verified/);
    // (the sanitizers were on: with either variable set, the emulated device refuses to launch
    // kernels built without the instrumentation, emu_sanitize_test.ts)
    assert.doesNotMatch(err, /racecheck:|memcheck:|runtime error:/);
  },
});
