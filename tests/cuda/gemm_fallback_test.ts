/**
 * dt_gemm_ex's fallback when cuBLASLt will not fuse an epilogue, however it
 * says so: the cuBLASLt stand-in of the emulated device refuses every fused
 * epilogue in each of the ways a real one may (NOT_SUPPORTED or another
 * status from the heuristic, zero algorithms, a matmul that refuses), and
 * every dt_gemm_ex case still matches the CPU library — the plain product
 * and dtrain's own epilogue kernel ran instead. The decision is made once
 * per shape (cached with the plan) and said once per shape under
 * DTRAIN_PROFILE=1.
 */
import assert from "node:assert/strict";
import { HAVE_EMU } from "../gpu/_emu.ts";

const REPO = new URL("../..", import.meta.url).pathname;

async function runCases(refusal: string | null, passes: number) {
  const env: Record<string, string> = { DTRAIN_DEVICE: "cuda-emu", DTRAIN_PROFILE: "1" };
  if (refusal) env.DTRAIN_CUBLASLT_EMU_EPILOGUE = refusal;
  const r = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--config",
      `${REPO}deno.json`,
      `${REPO}tests/cuda/scripts/gemm_ex_cases.ts`,
      String(passes),
    ],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const out = new TextDecoder().decode(r.stdout), err = new TextDecoder().decode(r.stderr);
  assert.equal(r.code, 0, `${out}\n${err}`);
  const result = JSON.parse(out.trim().split("\n").at(-1)!) as { ran: number; failed: string[] };
  const said = err.split("\n").filter((l) => l.includes("cuBLASLt does not fuse"));
  const afterFirstPass = err.slice(err.indexOf("pass 1 done")).split("\n")
    .filter((l) => l.includes("cuBLASLt does not fuse"));
  return { ...result, said, afterFirstPass, err };
}

for (const refusal of ["not-supported", "invalid-value", "no-algorithm", "matmul-refuses"]) {
  Deno.test({
    name:
      `dt_gemm_ex falls back to the unfused product and its epilogue kernel when cuBLASLt answers ${refusal}`,
    ignore: !HAVE_EMU,
    async fn() {
      const r = await runCases(refusal, 2);
      assert.deepEqual(r.failed, []);
      assert.ok(r.ran > 20, `${r.ran} cases`);
      // said under DTRAIN_PROFILE, once per shape: the second pass asks cuBLASLt nothing again
      assert.ok(r.said.length >= 4, r.err);
      assert.equal(new Set(r.said).size, r.said.length, r.said.join("\n"));
      assert.deepEqual(r.afterFirstPass, []);
      for (const epi of ["bias", "bias \\+ GELU", "bias gradient"]) {
        assert.ok(r.said.some((l) => new RegExp(`the ${epi} epilogue`).test(l)), r.said.join("\n"));
      }
      const how = refusal === "matmul-refuses"
        ? "cublasLtMatmul answered CUBLAS_STATUS_NOT_SUPPORTED"
        : refusal === "no-algorithm"
        ? "cublasLtMatmulAlgoGetHeuristic answered no algorithm"
        : `cublasLtMatmulAlgoGetHeuristic answered CUBLAS_STATUS_${
          refusal.replace("-", "_").toUpperCase()
        }`;
      // (the stand-in refuses the GELU epilogue of N = 37 on its own, as cuBLASLt: NOT_SUPPORTED)
      const refusedHow = r.said.filter((l) => l.includes(how));
      assert.ok(refusedHow.length >= r.said.length - 3, r.said.join("\n"));
    },
  });
}
