/**
 * A source check that runs everywhere (no nvcc needed): every CUDA runtime
 * and cuBLASLt call in kernels/cuda is wrapped in a check macro, every kernel
 * launch goes through DT_LAUNCH (no raw <<<...>>> outside its definition)
 * and is followed by DT_CHECK_LAUNCH, so no failure can pass silently and
 * both builds come from one source. The checker is tested on snippets, so it
 * can fail.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { blankCommentsAndStrings, uncheckedCalls } from "./_check_calls.ts";

const CUDA_DIR = fileURLToPath(new URL("../../kernels/cuda/", import.meta.url));

function cudaSources(): [string, string][] {
  return [...Deno.readDirSync(CUDA_DIR)]
    .filter((e) => e.isFile && (e.name.endsWith(".cu") || e.name.endsWith(".cuh")))
    .map((e) => [e.name, Deno.readTextFileSync(CUDA_DIR + e.name)] as [string, string])
    .sort();
}

Deno.test("every cuda*/cublas* call and kernel launch in kernels/cuda/*.cu is checked", () => {
  const sources = cudaSources();
  assert.ok(
    sources.length >= 8,
    `expected the CUDA sources in ${CUDA_DIR}, found ${sources.length}`,
  );
  const findings = sources.flatMap(([name, src]) => uncheckedCalls(name, src));
  assert.deepEqual(findings.map((f) => `${f.file}:${f.line}: ${f.what}`), []);
  // the check is not vacuous: the sources do make many checked calls and launches
  const all = sources.map(([, s]) => blankCommentsAndStrings(s)).join("\n");
  assert.ok((all.match(/DT_CHECK_CUDA\(/g) ?? []).length >= 30);
  assert.ok((all.match(/DT_CHECK_CUBLAS\(/g) ?? []).length >= 10);
  assert.ok((all.match(/\bDT_LAUNCH\(/g) ?? []).length >= 20);
  assert.equal((all.match(/<<</g) ?? []).length, 1, "<<< appears only in DT_LAUNCH's definition");
});

Deno.test("uncheckedCalls() flags unchecked calls and launches, and accepts checked ones", () => {
  const bad = [
    "static dt_status f(void* p, cudaStream_t s) {",
    "  cudaFree(p);",
    '  const char* name = "cudaMalloc(x)"; /* cudaMemset(p) in a comment */',
    "  cudaError_t e = cudaStreamSynchronize(s);",
    "  lt_.cublasLtMatmul(h, d);",
    "  DT_LAUNCH(k_, 1, 32, 0, s, p);",
    "  k_<<<1, 32, 0, s>>>(p);",
    '  DT_CHECK_LAUNCH(s, "k");',
    "  return DT_OK;",
    "}",
  ].join("\n");
  assert.deepEqual(uncheckedCalls("bad.cu", bad).map((f) => `${f.line}: ${f.what}`), [
    "2: cudaFree(...) outside a check macro",
    "4: cudaStreamSynchronize(...) outside a check macro",
    "5: cublasLtMatmul(...) outside a check macro",
    "6: kernel launch not followed by DT_CHECK_LAUNCH",
    "7: raw <<<...>>> launch: launch kernels with DT_LAUNCH",
  ]);
  const good = [
    "static dt_status f(void* p, cudaStream_t s) {",
    "  DT_CHECK_CUDA(cudaMemcpyAsync(p, p,",
    "                                4, cudaMemcpyDeviceToDevice, s));",
    "  DT_CHECK_CUBLAS(lt_.cublasLtMatmul(h, d));",
    "  DT_LAUNCH(k_<float>, dt_grid_for_(n, 256), 256, 0, s, p,",
    "            n);",
    '  DT_CHECK_LAUNCH(s, "k");',
    "  (void)cudaGetLastError(); /* allowed: it is the check */",
    "  return DT_OK;",
    "}",
  ].join("\n");
  assert.deepEqual(uncheckedCalls("good.cu", good), []);
});
