/**
 * The native build does what the job needs: a CPU run builds the CPU and
 * shared-memory libraries only, the GPU library only with a GPU present or
 * --device cuda, the emulated GPU for --device cuda-emu, Gloo for CPU ranks
 * across machines; and a gcc/g++ library splits into one compile per source
 * (run in parallel) and a link that gives a working library.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  DEFAULT_LIBRARIES,
  hasCommand,
  LIBRARIES,
  librariesFor,
  parseParts,
  partsForJob,
  SANITIZE_LIBRARY,
  splitCommand,
} from "../../scripts/build_native.ts";

const env = (vars: Record<string, string> = {}) => ({ get: (k: string) => vars[k] });
const names = (parts: Parameters<typeof librariesFor>[0]) => librariesFor(parts).map((l) => l.name);

Deno.test("a CPU run's plan holds the CPU and shared-memory libraries, never the CUDA library", () => {
  for (
    const argv of [["--nproc", "2", "examples/toy_ddp.ts"], ["--device", "cpu", "x.ts"], ["x.ts"]]
  ) {
    const parts = partsForJob(argv, env(), false);
    assert.deepEqual(parts, ["cpu"], argv.join(" "));
    assert.deepEqual(names(parts), ["libdtrain_cpu.so", "libdtrain_shm.so"]);
  }
  // --device cpu on a machine with a GPU: still no CUDA library
  assert.deepEqual(partsForJob(["--device=cpu", "x.ts"], env(), true), ["cpu"]);
});

Deno.test("the CUDA library is planned with a GPU present (device auto) or when --device cuda asks", () => {
  assert.deepEqual(partsForJob(["--nproc", "8", "train.ts"], env(), true), ["cpu", "cuda"]);
  assert.deepEqual(partsForJob(["--device", "cuda", "train.ts"], env(), false), ["cpu", "cuda"]);
  assert.deepEqual(partsForJob(["train.ts"], env({ DTRAIN_DEVICE: "cuda" }), false), [
    "cpu",
    "cuda",
  ]);
  assert.ok(names(["cuda"]).includes("libdtrain_cuda.so"));
  assert.ok(!names(["cuda"]).some((n) => n.includes("_emu")));
});

Deno.test("the sanitizers' kernel build is planned only when racecheck or memcheck asks, never by a build of everything", () => {
  for (const v of ["DTRAIN_EMU_RACECHECK", "DTRAIN_EMU_MEMCHECK"]) {
    const parts = partsForJob(["--device", "cuda-emu", "t.ts"], env({ [v]: "1" }), false);
    assert.deepEqual(parts, ["cpu", "cuda-emu", "cuda-emu-sanitize"]);
    assert.ok(names(parts).includes(SANITIZE_LIBRARY));
    // a CPU run ignores them
    assert.deepEqual(partsForJob(["t.ts"], env({ [v]: "1" }), false), ["cpu"]);
  }
  assert.ok(!DEFAULT_LIBRARIES().some((l) => l.name === SANITIZE_LIBRARY));
  assert.ok(DEFAULT_LIBRARIES().some((l) => l.name === "libdtrain_cuda_emu.so"));
});

Deno.test("the emulated GPU is planned for --device cuda-emu, Gloo for CPU ranks across machines", () => {
  const emu = partsForJob(["--device", "cuda-emu", "t.ts"], env(), false);
  assert.deepEqual(emu, ["cpu", "cuda-emu"]);
  assert.deepEqual(names(emu), [
    "libdtrain_cpu.so",
    "libdtrain_shm.so",
    "libdtrain_cudart_emu.so",
    "libdtrain_cuda_emu.so",
    "libdtrain_cublaslt_emu.so",
    "libdtrain_nccl_emu.so",
  ]);
  assert.deepEqual(partsForJob(["--nnodes", "2", "--nproc", "2", "t.ts"], env(), false), [
    "cpu",
    "gloo",
  ]);
  assert.deepEqual(
    partsForJob(["--nproc", "2", "t.ts"], env({ DTRAIN_CPU_BACKEND: "gloo" }), false),
    [
      "cpu",
      "gloo",
    ],
  );
  // across machines on GPUs: NCCL, not Gloo
  assert.deepEqual(partsForJob(["--nnodes", "2", "t.ts"], env(), true), ["cpu", "cuda"]);
  assert.deepEqual(names(["gloo"]).at(-1), "libdtrain_gloo.so");
});

Deno.test("the script's own arguments after its name do not choose what is built", () => {
  assert.deepEqual(partsForJob(["--nproc", "2", "train.ts", "--device", "cuda"], env(), false), [
    "cpu",
  ]);
});

Deno.test("every library belongs to a part, and a bad part name is an error naming the parts", () => {
  assert.deepEqual(
    [...new Set(names(["cpu", "cuda", "cuda-emu", "cuda-emu-sanitize", "gloo"]))].sort(),
    LIBRARIES.map((l) => l.name).sort(),
  );
  assert.throws(
    () => parseParts("cpu,gpu"),
    /--for gpu is not one of cpu, cuda, cuda-emu, cuda-emu-sanitize, gloo/,
  );
  assert.deepEqual(parseParts("cpu, gloo"), ["cpu", "gloo"]);
});

Deno.test("a one-run gcc command splits into per-source compiles and a link of the objects", () => {
  const argv = [
    "g++",
    "-O2",
    "-fPIC",
    "-shared",
    "-Ia",
    "-o",
    "out.so",
    "-x",
    "c++",
    "k/a.cu",
    "k/b.cu",
    "-x",
    "none",
    "-Lb",
    "-lz",
    "-Wl,-z,nodelete",
  ];
  const split = splitCommand(argv, ["k/a.cu", "k/b.cu"], (s) => `obj/${s.replace("/", "_")}.o`)!;
  assert.deepEqual(split.compile, [
    ["g++", "-O2", "-fPIC", "-Ia", "-x", "c++", "-c", "k/a.cu", "-o", "obj/k_a.cu.o"],
    ["g++", "-O2", "-fPIC", "-Ia", "-x", "c++", "-c", "k/b.cu", "-o", "obj/k_b.cu.o"],
  ]);
  assert.deepEqual(split.link, [
    "g++",
    "-O2",
    "-fPIC",
    "-shared",
    "-Ia",
    "-o",
    "out.so",
    "obj/k_a.cu.o",
    "obj/k_b.cu.o",
    "-Lb",
    "-lz",
    "-Wl,-z,nodelete",
  ]);
  assert.equal(splitCommand(["nvcc", "-o", "x", "a.cu"], ["a.cu"], (s) => s), null);
});

Deno.test({
  name: "the split commands build a shared library whose symbols work",
  ignore: !hasCommand("gcc"),
  async fn() {
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-split-" });
    try {
      Deno.writeTextFileSync(join(dir, "a.c"), "int twice(int x) { return 2 * x; }\n");
      Deno.writeTextFileSync(
        join(dir, "b.c"),
        "int twice(int); int quad(int x) { return twice(twice(x)); }\n",
      );
      const out = join(dir, "libsplit.so");
      const srcs = [join(dir, "a.c"), join(dir, "b.c")];
      const split = splitCommand(
        ["gcc", "-O2", "-fPIC", "-shared", "-o", out, ...srcs, "-lm"],
        srcs,
        (s) => s + ".o",
      )!;
      for (const [cmd, ...args] of [...split.compile, split.link]) {
        const r = await new Deno.Command(cmd!, { args, stderr: "piped" }).output();
        assert.ok(r.success, new TextDecoder().decode(r.stderr));
      }
      const lib = Deno.dlopen(out, { quad: { parameters: ["i32"], result: "i32" } });
      try {
        assert.equal(lib.symbols.quad(5), 20);
      } finally {
        lib.close();
      }
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});
