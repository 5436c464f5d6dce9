/**
 * The search for the NVIDIA libraries (ffi/cuda_libs.ts) in throw-away
 * folders: the order LD_LIBRARY_PATH, CUDA_HOME, system folders, pip's
 * nvidia-* wheels of a python3 on PATH; the newest soname first; and a miss
 * that names every folder tried. On this machine, the real search for the
 * missing driver and cuBLASLt says so.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  cudaLibraryDirs,
  describeMissing,
  findCudaLibrary,
  type LibrarySearchOptions,
} from "../../ffi/cuda_libs.ts";

/** Creates the given (empty) files under a new temporary folder; returns the folder. */
function tree(files: string[]): string {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-cuda-libs-" });
  for (const f of files) {
    const path = join(root, f);
    Deno.mkdirSync(join(path, ".."), { recursive: true });
    Deno.writeFileSync(path, new Uint8Array(0));
  }
  return root;
}

/** A hermetic search: only the given variables, no system folders or prefixes unless named. */
function opts(
  vars: Record<string, string>,
  more: Partial<LibrarySearchOptions> = {},
): LibrarySearchOptions {
  return { env: (n) => vars[n], systemDirs: [], pythonPrefixes: [], ...more };
}

Deno.test("findCudaLibrary() names every folder it tried when a library is missing", () => {
  const root = tree(["a/unrelated.so", "b/libcublas.so.12"]);
  try {
    const r = findCudaLibrary(
      "cublasLt",
      opts({ LD_LIBRARY_PATH: `${root}/a:${root}/b` }, { systemDirs: [`${root}/c`] }),
    );
    assert.equal(r.path, null);
    assert.deepEqual(r.tried, [`${root}/a`, `${root}/b`, `${root}/c`]);
    assert.equal(
      describeMissing(r),
      `libcublasLt.so.13 (or libcublasLt.so.12, libcublasLt.so) not found; looked in ${root}/a, ${root}/b, ${root}/c`,
    );
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("findCudaLibrary() searches LD_LIBRARY_PATH, then CUDA_HOME, then the system folders", () => {
  const root = tree([
    "ld/libnccl.so.2",
    "home/lib64/libnccl.so.2",
    "sys/libnccl.so.2",
    "home/lib64/libcuda.so.1",
  ]);
  try {
    const vars = { LD_LIBRARY_PATH: `${root}/ld`, CUDA_HOME: `${root}/home` };
    const o = opts(vars, { systemDirs: [`${root}/sys`] });
    assert.equal(findCudaLibrary("nccl", o).path, `${root}/ld/libnccl.so.2`);
    assert.equal(findCudaLibrary("driver", o).path, `${root}/home/lib64/libcuda.so.1`);
    assert.equal(
      findCudaLibrary("nccl", opts({}, { systemDirs: [`${root}/sys`] })).path,
      `${root}/sys/libnccl.so.2`,
    );
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("findCudaLibrary() prefers the newest soname within a folder", () => {
  const root = tree(["lib/libcublasLt.so.12", "lib/libcublasLt.so.13", "lib/libcublasLt.so"]);
  try {
    assert.equal(
      findCudaLibrary("cublasLt", opts({ LD_LIBRARY_PATH: `${root}/lib` })).path,
      `${root}/lib/libcublasLt.so.13`,
    );
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("findCudaLibrary() finds pip's nvidia-* wheels of a python3 on PATH (a venv) and of known prefixes", () => {
  const root = tree([
    "venv/bin/python3",
    "venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13",
    "venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "usr/lib/python3/dist-packages/nvidia/cuda_runtime/lib/libcudart.so.12",
  ]);
  try {
    const o = opts({ PATH: `/nonexistent:${root}/venv/bin` }, { pythonPrefixes: [`${root}/usr`] });
    assert.equal(
      findCudaLibrary("cublasLt", o).path,
      `${root}/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13`,
    );
    assert.equal(
      findCudaLibrary("nccl", o).path,
      `${root}/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2`,
    );
    assert.equal(
      findCudaLibrary("cudart", o).path,
      `${root}/usr/lib/python3/dist-packages/nvidia/cuda_runtime/lib/libcudart.so.12`,
    );
    // a folder on PATH without python3 adds nothing
    assert.ok(!cudaLibraryDirs(o).some((d) => d.startsWith("/nonexistent")));
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("findCudaLibrary() looks in VIRTUAL_ENV, CONDA_PREFIX and every python3 installation of the machine, not only PATH's", () => {
  const root = tree([
    "venv/bin/python3",
    "venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "conda/bin/python3.12",
    "conda/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13",
    "home/.pyenv/versions/3.12.4/bin/python3.12",
    "home/.pyenv/versions/3.12.4/lib64/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.13",
    "opt/torch/bin/python3",
    "opt/torch/lib/python3.13/site-packages/nvidia/cusparse/lib/libcusparse.so.12",
    "opt/not-python/lib/python3.13/site-packages/nvidia/ignored/lib/x.so",
  ]);
  try {
    const o = opts(
      { VIRTUAL_ENV: `${root}/venv`, CONDA_PREFIX: `${root}/conda`, PATH: "/nonexistent" },
      { pythonRoots: [`${root}/opt`, `${root}/home/.pyenv/versions`] },
    );
    const dirs = cudaLibraryDirs(o);
    assert.deepEqual(dirs, [
      `${root}/conda/lib`,
      `${root}/venv/lib/python3.11/site-packages/nvidia/nccl/lib`,
      `${root}/conda/lib/python3.12/site-packages/nvidia/cu13/lib`,
      `${root}/opt/torch/lib/python3.13/site-packages/nvidia/cusparse/lib`,
      `${root}/home/.pyenv/versions/3.12.4/lib64/python3.12/site-packages/nvidia/cuda_runtime/lib`,
    ]);
    assert.equal(findCudaLibrary("nccl", o).path, `${dirs[1]}/libnccl.so.2`);
    assert.equal(findCudaLibrary("cublasLt", o).path, `${dirs[2]}/libcublasLt.so.13`);
    assert.equal(findCudaLibrary("cudart", o).path, `${dirs[4]}/libcudart.so.13`);
    // without the variables and roots, none of these is found
    const bare = findCudaLibrary("nccl", opts({ PATH: "/nonexistent" }));
    assert.equal(bare.path, null);
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test({
  name:
    "on a machine without the NVIDIA driver, the real search says it is missing and where it looked",
  ignore: findCudaLibrary("driver").path !== null,
  fn() {
    const r = findCudaLibrary("driver");
    const text = describeMissing(r);
    assert.match(text, /^libcuda\.so\.1 \(or libcuda\.so\) not found; looked in /);
    assert.ok(
      text.includes("/usr/local/cuda/lib64") && text.includes("/usr/lib/x86_64-linux-gnu"),
      text,
    );
  },
});
