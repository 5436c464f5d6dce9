/**
 * Runs the op sweep's dt_gemm_ex cases (every epilogue, the small shapes of
 * the emulated device) `passes` times on the device of DTRAIN_DEVICE against
 * the CPU library, and prints one JSON line: how many ran and the failures.
 * tests/cuda/gemm_fallback_test.ts runs it with a cuBLASLt stand-in that
 * refuses every fused epilogue.
 *
 *   DTRAIN_DEVICE=cuda-emu deno run -A tests/cuda/scripts/gemm_ex_cases.ts [passes]
 */
import { Rng, runCase } from "../../../scripts/gpu_check/_harness.ts";
import { EMULATED_GEMM_EX, gemmExCases } from "../../../scripts/gpu_check/op_cases_gemm_ex.ts";

const passes = Number(Deno.args[0] ?? "1");
const cases = gemmExCases(new Rng(3), EMULATED_GEMM_EX);
const failed: string[] = [];
let ran = 0;
for (let p = 0; p < passes; p++) {
  for (const c of cases) {
    const r = runCase(c);
    ran++;
    if (!r.ok) failed.push(`${c.op} ${c.dtype} ${c.size}: ${r.detail}`);
  }
  console.error(`pass ${p + 1} done`);
}
console.log(JSON.stringify({ ran, failed }));
