/**
 * Builds the native libraries from kernels/ into build/: the CPU kernel
 * library always, the CUDA one when nvcc is present and DTRAIN_CUDA is not
 * "0", and, where g++ is present, the emulated CUDA device: the same CUDA
 * sources compiled for the host (libdtrain_cuda_emu.so on
 * libdtrain_cudart_emu.so), with stand-ins for cuBLASLt and NCCL. A library
 * is rebuilt only when the hash of its sources and flags changed; the hash
 * is stamped into the library (dt_build_hash) and into a .hash file beside
 * it. Output is written under a temporary name and renamed, so concurrent
 * builds and readers never see half a file.
 *
 *   deno run -A scripts/build_native.ts [--force] [--quiet]
 */
import { join } from "node:path";
import { fileURLToPath as fromFileUrl } from "node:url";
import { createHash } from "node:crypto";
import { nvccHostArgs, toolVersion } from "./nvcc_host.ts";

const ROOT = fromFileUrl(new URL("..", import.meta.url));
export const BUILD_DIR = Deno.env.get("DTRAIN_BUILD_DIR") ??
  join(ROOT, "build");

export interface LibrarySpec {
  /** file name inside build/ */
  name: string;
  /** source folders (relative to the repository root) hashed */
  dirs: string[];
  /** the folders whose files are compiled (default: dirs) */
  compileDirs?: string[];
  /** file extensions compiled */
  compileExt: string[];
  /** the compiler and its flags, given the output path and build hash */
  command: (out: string, hash: string, sources: string[]) => string[];
  /** false: skip silently (a missing optional toolchain) */
  available: () => boolean;
  /** the compiler's stderr is kept in build/<name><report> (e.g. ptxas's per-kernel report) */
  report?: string;
  /** the toolchain's versions, part of the build hash (a new compiler rebuilds the library) */
  toolchain?: () => string;
  /** arguments decided only when the library is built (nvcc's host compiler), put first */
  buildArgs?: () => string[];
}

function listFiles(dir: string): string[] {
  const out: string[] = [];
  try {
    for (const e of Deno.readDirSync(join(ROOT, dir))) {
      const rel = `${dir}/${e.name}`;
      if (e.isDirectory) out.push(...listFiles(rel));
      else if (e.isFile) out.push(rel);
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return out.sort();
}

const commandsFound = new Map<string, boolean>();

/** Whether `cmd --version` runs (asked once per process). */
function hasCommand(cmd: string): boolean {
  let found = commandsFound.get(cmd);
  if (found === undefined) {
    try {
      found = new Deno.Command(cmd, { args: ["--version"], stdout: "null", stderr: "null" })
        .outputSync().success;
    } catch {
      found = false;
    }
    commandsFound.set(cmd, found);
  }
  return found;
}

const CPU_FLAGS = [
  "-O3",
  "-std=gnu11",
  "-fPIC",
  "-shared",
  "-pthread",
  "-fvisibility=hidden",
  // Baseline x86-64 so the library loads on any CPU; AVX2/FMA code paths are
  // compiled per function with target attributes and chosen at run time.
  "-march=x86-64",
  "-mtune=generic",
  // Match PyTorch's elementwise rounding: no silent a*b+c -> fma contraction.
  "-ffp-contract=off",
  "-fno-math-errno",
  "-fno-trapping-math",
  "-Wall",
  "-Werror=implicit-function-declaration",
  // Never unload: a test process opens and closes the library many times,
  // and the thread pool's workers live inside it.
  "-Wl,-z,nodelete",
];

// ---- libdtrain_gloo.so: the Gloo process group (CPU ranks across machines) ----
// A C++ shim over Debian's libgloo (libgloo-dev) with an extern "C" API. Its
// RPATH is $ORIGIN as DT_RPATH (not RUNPATH), which also applies to libgloo's
// own dependencies, so the single file can carry libgloo.so.0 and the
// libraries it needs beside it (see GLOO_RUNTIME_LIBS in scripts/build_single.ts).
export const GLOO_HEADER = "/usr/include/gloo/allreduce.h";

function hasGloo(): boolean {
  try {
    return Deno.statSync(GLOO_HEADER).isFile && hasCommand("g++");
  } catch {
    return false;
  }
}

const GLOO_LIBRARY: LibrarySpec = {
  name: "libdtrain_gloo.so",
  dirs: ["kernels/common", "kernels/gloo"],
  compileExt: [".cc"],
  command: (out, hash, sources) => [
    "g++",
    "-O2",
    "-std=c++17",
    "-fPIC",
    "-shared",
    "-pthread",
    "-fvisibility=hidden",
    "-march=x86-64",
    "-mtune=generic",
    "-ffp-contract=off",
    "-Wall",
    `-DDT_BUILD_HASH="${hash}"`,
    "-Ikernels/common",
    "-o",
    out,
    ...sources,
    "-lgloo",
    "-Wl,--disable-new-dtags,-rpath,$ORIGIN",
    // Gloo's TCP device runs a thread inside libgloo: never unload.
    "-Wl,-z,nodelete",
  ],
  available: () => hasGloo() && Deno.env.get("DTRAIN_GLOO") !== "0",
};
// ---- end of libdtrain_gloo.so ----

// The emulated device (host C++): flags of the kernel sources as nvcc's host
// side sees them, no FMA contraction (the emulator rounds like the CPU library;
// nvcc contracts a*b+c into FMA, so the real GPU is held to tolerances).
const EMU_FLAGS = [
  "-std=gnu++20",
  "-O2",
  "-fPIC",
  "-shared",
  "-pthread",
  "-fvisibility=hidden",
  "-fvisibility-inlines-hidden",
  "-ffp-contract=off",
  "-Wall",
  "-Wno-format-truncation",
  // found beside each other, also inside the single file's extraction cache
  "-Wl,-rpath,$ORIGIN",
  "-Wl,-z,nodelete",
  "-Wl,--no-undefined",
];

/** g++ builds the emulated device unless DTRAIN_CUDA_EMU=0. */
function haveEmuToolchain(): boolean {
  return hasCommand("g++") && Deno.env.get("DTRAIN_CUDA_EMU") !== "0";
}

export const LIBRARIES: LibrarySpec[] = [
  {
    name: "libdtrain_cpu.so",
    dirs: ["kernels/common", "kernels/cpu"],
    compileExt: [".c"],
    command: (out, hash, sources) => [
      "gcc",
      ...CPU_FLAGS,
      `-DDT_BUILD_HASH="${hash}"`,
      "-Ikernels/common",
      "-o",
      out,
      ...sources,
      "-lm",
    ],
    available: () => true,
  },
  {
    name: "libdtrain_shm.so",
    dirs: ["kernels/common", "kernels/shm"],
    compileExt: [".c"],
    command: (out, hash, sources) => [
      "gcc",
      ...CPU_FLAGS,
      `-DDT_BUILD_HASH="${hash}"`,
      "-Ikernels/common",
      "-o",
      out,
      ...sources,
      "-lrt",
    ],
    available: () => listFiles("kernels/shm").some((f) => f.endsWith(".c")),
  },
  {
    // The CUDA kernel library: the same kernels/common bodies as the CPU
    // library, a fat binary for sm_80 and sm_90 plus sm_90 PTX (newer GPUs
    // JIT it). cudart is linked statically, so only the driver (libcuda.so.1)
    // is needed at run time; cuBLASLt is opened with dlopen (hence -ldl).
    name: "libdtrain_cuda.so",
    dirs: ["kernels/common", "kernels/cuda"],
    compileExt: [".cu"],
    command: (out, hash, sources) => [
      "nvcc",
      "-O3",
      "-std=c++17",
      "-shared",
      "-cudart",
      "static",
      "-Xcompiler",
      "-fPIC,-fvisibility=hidden,-ffp-contract=off",
      "--threads",
      "2",
      "-gencode",
      "arch=compute_80,code=sm_80",
      "-gencode",
      "arch=compute_90,code=sm_90",
      "-gencode",
      "arch=compute_90,code=compute_90",
      // registers, stack frame, spills and shared memory of every kernel, kept
      // in build/libdtrain_cuda.so.ptxas.txt (tests/cuda/ptxas_test.ts reads it)
      "-Xptxas",
      "-v",
      `-DDT_BUILD_HASH="${hash}"`,
      "-Ikernels/common",
      "-o",
      out,
      ...sources,
      "-ldl",
      "-lpthread",
    ],
    available: () => hasCommand("nvcc") && Deno.env.get("DTRAIN_CUDA") !== "0",
    report: ".ptxas.txt",
    toolchain: () =>
      [toolVersion("nvcc"), toolVersion("g++"), Deno.env.get("CUDAHOSTCXX") ?? ""].join("\n"),
    buildArgs: nvccHostArgs,
  },
  {
    // The emulated GPU's runtime: CUDA's runtime API, fibers for CUDA threads,
    // streams as host threads. Its soname lets the libraries below find it
    // beside themselves ($ORIGIN).
    name: "libdtrain_cudart_emu.so",
    dirs: ["kernels/cuda_emu"],
    compileExt: [".cpp"],
    command: (out, _hash, sources) => [
      "g++",
      ...EMU_FLAGS,
      "-Ikernels/cuda_emu",
      "-Wl,-soname,libdtrain_cudart_emu.so",
      "-Wl,--version-script=kernels/cuda_emu/cudart_emu.map",
      "-o",
      out,
      ...sources,
    ],
    available: haveEmuToolchain,
  },
  {
    // kernels/cuda compiled by g++ for the emulated device: exactly the
    // exports of libdtrain_cuda.so (tests/cuda/symbols_test.ts).
    name: "libdtrain_cuda_emu.so",
    dirs: ["kernels/common", "kernels/cuda", "kernels/cuda_emu"],
    compileDirs: ["kernels/cuda"],
    compileExt: [".cu"],
    command: (out, hash, sources) => [
      "g++",
      ...EMU_FLAGS,
      `-DDT_BUILD_HASH="${hash}"`,
      "-Ikernels/cuda_emu/include",
      "-Ikernels/common",
      "-Wl,--version-script=kernels/cuda_emu/kernels_emu.map",
      "-o",
      out,
      "-x",
      "c++",
      ...sources,
      "-x",
      "none",
      `-L${BUILD_DIR}`,
      "-ldtrain_cudart_emu",
      "-ldl",
    ],
    available: haveEmuToolchain,
  },
  {
    // cuBLASLt's calls for the emulated device; products run libdtrain_cpu.so's dt_gemm.
    name: "libdtrain_cublaslt_emu.so",
    dirs: ["kernels/cublaslt_emu", "kernels/cuda_emu"],
    compileDirs: ["kernels/cublaslt_emu"],
    compileExt: [".cpp"],
    command: (out, _hash, sources) => [
      "g++",
      ...EMU_FLAGS,
      "-Ikernels/cuda_emu/include",
      "-Ikernels/cuda",
      "-Wl,--version-script=kernels/cublaslt_emu/cublaslt_emu.map",
      "-o",
      out,
      ...sources,
      `-L${BUILD_DIR}`,
      "-ldtrain_cudart_emu",
      "-ldl",
    ],
    available: haveEmuToolchain,
  },
  {
    // NCCL for the emulated device, over libdtrain_shm.so's collectives (its
    // AddressSanitizer build is made by tests/cuda/nccl_emu_test.ts).
    name: "libdtrain_nccl_emu.so",
    dirs: ["kernels/nccl_emu", "kernels/cuda_emu"],
    compileDirs: ["kernels/nccl_emu"],
    compileExt: [".cpp"],
    command: (out, _hash, sources) => [
      "g++",
      ...EMU_FLAGS,
      "-Ikernels/cuda_emu/include",
      "-Wl,--version-script=kernels/nccl_emu/nccl_emu.map",
      "-o",
      out,
      ...sources,
      `-L${BUILD_DIR}`,
      "-ldtrain_shm", // first: its dt_last_error is the one this library reads
      "-ldtrain_cudart_emu",
    ],
    available: haveEmuToolchain,
  },
  GLOO_LIBRARY,
];

function sourceHash(spec: LibrarySpec): { hash: string; sources: string[] } {
  const h = createHash("sha256");
  const files = spec.dirs.flatMap(listFiles);
  for (const f of files) {
    h.update(f + "\0");
    h.update(Deno.readFileSync(join(ROOT, f)));
  }
  h.update(spec.command("OUT", "HASH", []).join(" "));
  if (spec.toolchain) h.update(spec.toolchain());
  const sources = (spec.compileDirs ?? spec.dirs).flatMap(listFiles)
    .filter((f) => spec.compileExt.some((ext) => f.endsWith(ext)));
  return { hash: h.digest("hex").slice(0, 16), sources };
}

/** Builds every available library that is out of date; returns the built names. */
export function buildNative(
  opts: { force?: boolean; quiet?: boolean } = {},
): string[] {
  Deno.mkdirSync(BUILD_DIR, { recursive: true });
  const built: string[] = [];
  for (const spec of LIBRARIES) {
    if (!spec.available()) continue;
    const { hash, sources } = sourceHash(spec);
    const out = join(BUILD_DIR, spec.name);
    const hashFile = out + ".hash";
    let current = "";
    try {
      current = Deno.readTextFileSync(hashFile).trim();
      Deno.statSync(out);
    } catch {
      current = "";
    }
    if (!opts.force && current === hash) continue;
    const tmp = `${out}.tmp-${Deno.pid}`;
    const [cmd, ...args] = spec.command(tmp, hash, sources);
    if (spec.buildArgs) args.unshift(...spec.buildArgs());
    if (!opts.quiet) {
      console.error(
        `dtrain: building ${spec.name} (${sources.length} sources)`,
      );
    }
    const r = new Deno.Command(cmd!, {
      args,
      cwd: ROOT,
      stdout: "inherit",
      stderr: spec.report ? "piped" : "inherit",
    })
      .outputSync();
    if (spec.report) {
      const text = new TextDecoder().decode(r.stderr);
      Deno.writeTextFileSync(join(BUILD_DIR, spec.name + spec.report), text);
      if (!r.success) console.error(text);
    }
    if (!r.success) {
      try {
        Deno.removeSync(tmp);
      } catch { /* nothing was written */ }
      throw new Error(
        `Cannot build ${spec.name}: ${cmd} exited with code ${r.code}`,
      );
    }
    Deno.renameSync(tmp, out);
    Deno.writeTextFileSync(hashFile + `.tmp-${Deno.pid}`, hash + "\n");
    Deno.renameSync(hashFile + `.tmp-${Deno.pid}`, hashFile);
    built.push(spec.name);
  }
  return built;
}

export { hasCommand };

if (import.meta.main) {
  const force = Deno.args.includes("--force");
  const quiet = Deno.args.includes("--quiet");
  buildNative({ force, quiet });
}
