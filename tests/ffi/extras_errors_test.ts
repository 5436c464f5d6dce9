/**
 * The CPU library's host-only extras raise the same error as every other
 * native call: the generator's draws (ffi/cpu_random.ts) and the GEMM
 * extras (ffi/cpu_extras.ts) throw DtNativeError naming the symbol, the
 * library and its own text.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { cpuRandomCalls } from "../../ffi/cpu_random.ts";
import { DtNativeError } from "../../ffi/native.ts";

buildNative({ quiet: true });

Deno.test("a refused draw of the generator throws DtNativeError with the library's text", () => {
  const calls = cpuRandomCalls();
  assert.ok(calls !== null, "libdtrain_cpu.so did not open");
  assert.throws(() => calls.dt_cpu_normal_fill16(new Float32Array(16), -1n, 0, 1), (e: unknown) => {
    assert.ok(e instanceof DtNativeError, String(e));
    assert.equal(e.symbol, "dt_cpu_normal_fill16");
    assert.equal(e.library, "libdtrain_cpu.so");
    assert.equal(e.text, "dt_cpu_normal_fill16: block count -1 is negative");
    return true;
  });
});

Deno.test("gemmKernel() under a CPU cap it does not know throws DtNativeError", async () => {
  const script = `import { gemmKernel } from ${
    JSON.stringify(new URL("../../ffi/cpu_extras.ts", import.meta.url).href)
  };
    try {
      gemmKernel("f32");
      console.log("no error");
    } catch (e) {
      console.log(e.name, e.symbol, e.library);
      console.log(e.text);
    }`;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", script],
    env: { DTRAIN_CPU_ISA: "sse9" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text);
  const [first, second] = text.trim().split("\n");
  assert.equal(first, "DtNativeError dt_cpu_gemm_kernel libdtrain_cpu.so");
  assert.match(second!, /DTRAIN_CPU_ISA=sse9 is not supported/);
});
