/**
 * nvcc's host compiler (scripts/nvcc_host.ts): the default when nvcc accepts
 * it, CUDAHOSTCXX when set, else the newest older g++ nvcc accepts, else an
 * error saying what to install; and the toolchain's versions are part of the
 * CUDA library's build hash.
 */
import assert from "node:assert/strict";
import { chooseHostCompiler, type HostProbe, nvccCompressArgs } from "../../scripts/nvcc_host.ts";

const UNSUPPORTED =
  "error -- unsupported GNU version! gcc versions later than 14 are not supported! The nvcc flag " +
  "'-allow-unsupported-compiler' can be used to override this version check";

/** nvcc that accepts exactly `accepted` (null: the default host compiler). */
function fakeNvcc(
  accepted: (string | null)[],
): { probe: (cc: string | null) => HostProbe; asked: (string | null)[] } {
  const asked: (string | null)[] = [];
  return {
    asked,
    probe: (cc) => {
      asked.push(cc);
      return accepted.includes(cc) ? { ok: true, stderr: "" } : { ok: false, stderr: UNSUPPORTED };
    },
  };
}

const noEnv = () => undefined;

Deno.test("chooseHostCompiler() keeps nvcc's default host compiler when nvcc accepts it", () => {
  const n = fakeNvcc([null]);
  assert.deepEqual(chooseHostCompiler(n.probe, ["g++-14", "g++-13"], noEnv), []);
  assert.deepEqual(n.asked, [null]);
});

Deno.test("chooseHostCompiler() passes the newest older g++ nvcc accepts with -ccbin", () => {
  const n = fakeNvcc(["g++-13", "g++-12"]);
  assert.deepEqual(chooseHostCompiler(n.probe, ["g++-14", "g++-13", "g++-12"], noEnv), [
    "-ccbin",
    "g++-13",
  ]);
  assert.deepEqual(n.asked, [null, "g++-14", "g++-13"]);
});

Deno.test("chooseHostCompiler() says what to install when no host compiler is accepted", () => {
  const n = fakeNvcc([]);
  assert.throws(
    () => chooseHostCompiler(n.probe, ["g++-14", "g++-13"], noEnv),
    /nvcc does not support this machine's host compiler \(error -- unsupported GNU version! gcc versions later than 14 are not supported!.*\), and no older g\+\+ it accepts is on PATH \(tried g\+\+-14, g\+\+-13\): install one \(e\.g\. apt-get install g\+\+-13\) or set CUDAHOSTCXX/,
  );
});

Deno.test("chooseHostCompiler() takes CUDAHOSTCXX as given, and leaves NVCC_CCBIN to nvcc", () => {
  const n = fakeNvcc([]);
  assert.deepEqual(
    chooseHostCompiler(n.probe, [], (k) => k === "CUDAHOSTCXX" ? "/opt/gcc13/bin/g++" : undefined),
    ["-ccbin", "/opt/gcc13/bin/g++"],
  );
  assert.deepEqual(
    chooseHostCompiler(n.probe, [], (k) => k === "NVCC_CCBIN" ? "g++-12" : undefined),
    [],
  );
  assert.deepEqual(n.asked, []);
});

Deno.test("chooseHostCompiler() reports another nvcc failure as it is", () => {
  const probe = () => ({ ok: false, stderr: "nvcc fatal   : Could not set up the environment" });
  assert.throws(
    () => chooseHostCompiler(probe, ["g++-13"], noEnv),
    /default host compiler: nvcc fatal/,
  );
});

Deno.test({
  name: "the CUDA library's build hash covers nvcc's and the host compiler's versions",
  async fn() {
    const { LIBRARIES } = await import("../../scripts/build_native.ts");
    const cuda = LIBRARIES.find((l) => l.name === "libdtrain_cuda.so")!;
    assert.ok(cuda.toolchain, "libdtrain_cuda.so has no toolchain in its hash");
    const text = cuda.toolchain();
    if (Deno.env.get("DTRAIN_CUDA") !== "0" && cuda.available()) {
      assert.match(text, /Cuda compilation tools/);
    }
    assert.equal(cuda.buildArgs !== undefined, true);
  },
});

Deno.test("nvccCompressArgs() asks for a size-compressed fat binary from nvcc 12.8 on, nothing before or unknown", () => {
  const said = (v: string) =>
    `nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release ${v}, V${v}.1`;
  assert.deepEqual(nvccCompressArgs(said("13.0")), ["--compress-mode=size"]);
  assert.deepEqual(nvccCompressArgs(said("12.8")), ["--compress-mode=size"]);
  assert.deepEqual(nvccCompressArgs(said("12.6")), []);
  assert.deepEqual(nvccCompressArgs(said("11.8")), []);
  assert.deepEqual(nvccCompressArgs(""), []);
});
