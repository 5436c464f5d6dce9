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
 * What a job needs is built when it needs it (docs/BUILD.md): `--for` names
 * the parts (cpu: the CPU and shared-memory libraries, always; cuda: the GPU
 * library; cuda-emu: the emulated GPU; gloo: the CPU process group across
 * machines), `--job ARGS…` takes them from a `dtrain` command line, and with
 * neither every available library is built (what the test suite needs).
 * Sources compile in parallel (DTRAIN_BUILD_JOBS, default: every core), a
 * line per library and its progress on stderr.
 *
 *   deno run -A scripts/build_native.ts [--force] [--quiet] [--for cpu,cuda,cuda-emu,gloo]
 *   deno run -A scripts/build_native.ts [--quiet] --job [dtrain arguments…]
 */
import { join } from "node:path";
import { fileURLToPath as fromFileUrl } from "node:url";
import { createHash } from "node:crypto";
import { nvccCompressArgs, nvccHostArgs, toolVersion } from "./nvcc_host.ts";

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
  /** built only when its part is asked for, never by a build of everything */
  onDemand?: boolean;
}

/** The emulated device's kernels built for its sanitizers (DTRAIN_EMU_RACECHECK, DTRAIN_EMU_MEMCHECK). */
export const SANITIZE_LIBRARY = "libdtrain_cuda_emu_sanitize.so";

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

/**
 * The sanitizer build of the emulated device's kernels: g++'s ThreadSanitizer
 * instrumentation makes every load, store and atomic a call, answered by
 * kernels/cuda_emu_sanitize/access_hooks.cpp (not by ThreadSanitizer's run
 * time, which could not be loaded into a Deno that did not start with it),
 * plus UndefinedBehaviorSanitizer, which stops at its first finding.
 */
export const EMU_SANITIZE_FLAGS = [
  "-g",
  "-DDT_EMU_SANITIZE",
  "-fsanitize=thread,undefined",
  "--param=tsan-instrument-func-entry-exit=0",
  "-fno-sanitize-recover=undefined",
];
/**
 * What the sanitizer build links: the default libraries spelled out, because
 * g++ would add ThreadSanitizer's run time with them (-nodefaultlibs drops it).
 */
export const EMU_SANITIZE_LIBS = [
  "-nodefaultlibs",
  "-lubsan",
  "-lstdc++",
  "-lm",
  "-lc",
  "-lgcc_s",
  "-lgcc",
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
      ...nvccCompressArgs(),
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
    // The same kernels for the emulated device's sanitizers (DTRAIN_EMU_RACECHECK,
    // DTRAIN_EMU_MEMCHECK; docs/GPU.md). Built only when asked for (part
    // cuda-emu-sanitize): the plain build stays fast.
    name: SANITIZE_LIBRARY,
    dirs: ["kernels/common", "kernels/cuda", "kernels/cuda_emu", "kernels/cuda_emu_sanitize"],
    compileDirs: ["kernels/cuda", "kernels/cuda_emu_sanitize"],
    compileExt: [".cu", ".cpp"],
    command: (out, hash, sources) => [
      "g++",
      ...EMU_FLAGS,
      ...EMU_SANITIZE_FLAGS,
      `-DDT_BUILD_HASH="${hash}"`,
      "-Ikernels/cuda_emu/include",
      "-Ikernels/cuda_emu",
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
      ...EMU_SANITIZE_LIBS,
    ],
    available: haveEmuToolchain,
    onDemand: true,
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

/** The parts a job can need; "cpu" is always built. */
export const PARTS = ["cpu", "cuda", "cuda-emu", "cuda-emu-sanitize", "gloo"] as const;
export type BuildPart = typeof PARTS[number];

/** The libraries of each part, in build order (the emulated device links against the CPU ones). */
const PART_LIBRARIES: Record<BuildPart, string[]> = {
  cpu: ["libdtrain_cpu.so", "libdtrain_shm.so"],
  cuda: ["libdtrain_cuda.so"],
  "cuda-emu": [
    "libdtrain_cudart_emu.so",
    "libdtrain_cuda_emu.so",
    "libdtrain_cublaslt_emu.so",
    "libdtrain_nccl_emu.so",
  ],
  "cuda-emu-sanitize": [
    "libdtrain_cudart_emu.so",
    SANITIZE_LIBRARY,
    "libdtrain_cublaslt_emu.so",
    "libdtrain_nccl_emu.so",
  ],
  gloo: ["libdtrain_gloo.so"],
};

/** Every library a build of everything makes (those built on demand only when asked for). */
export const DEFAULT_LIBRARIES = (): LibrarySpec[] => LIBRARIES.filter((l) => !l.onDemand);

/** The library specs that `parts` need (the CPU part always), in LIBRARIES order. */
export function librariesFor(parts: readonly BuildPart[]): LibrarySpec[] {
  const names = new Set(["cpu", ...parts].flatMap((p) => PART_LIBRARIES[p as BuildPart]));
  return LIBRARIES.filter((l) => names.has(l.name));
}

/** Parses `--for cpu,cuda…`, refusing a name that is not a part. */
export function parseParts(list: string): BuildPart[] {
  const parts = list.split(",").map((p) => p.trim()).filter((p) => p !== "");
  for (const p of parts) {
    if (!(PARTS as readonly string[]).includes(p)) {
      throw new RangeError(`build_native: --for ${p} is not one of ${PARTS.join(", ")}`);
    }
  }
  return parts as BuildPart[];
}

/** Whether this machine has an NVIDIA GPU (the launcher's test for --device auto). */
export function gpuPresent(): boolean {
  try {
    Deno.statSync("/dev/nvidiactl");
    return true;
  } catch {
    return false;
  }
}

/**
 * The parts a `dtrain` command line needs: the GPU library for --device cuda,
 * or for auto (the default, DTRAIN_DEVICE) on a machine with a GPU; the
 * emulated GPU for --device cuda-emu; Gloo for CPU ranks on more than one
 * machine (--nnodes > 1, DTRAIN_NNODES) or when DTRAIN_CPU_BACKEND=gloo asks
 * for it. The launcher's options are read up to the script's name.
 */
export function partsForJob(
  argv: readonly string[],
  env: { get(name: string): string | undefined } = Deno.env,
  hasGpu: boolean = gpuPresent(),
): BuildPart[] {
  let device = env.get("DTRAIN_DEVICE") || "auto";
  let nnodes = Number(env.get("DTRAIN_NNODES") || "1");
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith("-") && /\.(ts|js|mjs|mts)$/.test(a)) break; // the script: what follows is its own
    const [flag, inline] = a.includes("=")
      ? [a.slice(0, a.indexOf("=")), a.slice(a.indexOf("=") + 1)]
      : [a, undefined];
    if (flag === "--device") device = inline ?? argv[++i] ?? device;
    else if (flag === "--nnodes") nnodes = Number(inline ?? argv[++i] ?? nnodes);
  }
  const parts: BuildPart[] = ["cpu"];
  const gpu = device === "cuda" || (device === "auto" && hasGpu);
  if (gpu) parts.push("cuda");
  if (device === "cuda-emu") {
    parts.push("cuda-emu");
    // the emulated device's sanitizers load the instrumented kernels (docs/GPU.md)
    if (env.get("DTRAIN_EMU_RACECHECK") === "1" || env.get("DTRAIN_EMU_MEMCHECK") === "1") {
      parts.push("cuda-emu-sanitize");
    }
  }
  const cpuRanks = device === "cpu" || (device === "auto" && !hasGpu);
  const wantsGloo = (env.get("DTRAIN_CPU_BACKEND") ?? "").trim().toLowerCase() === "gloo";
  if (cpuRanks && (nnodes > 1 || wantsGloo)) parts.push("gloo");
  return parts;
}

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

/** A library that is out of date: what to run to build it. */
interface BuildStep {
  spec: LibrarySpec;
  hash: string;
  sources: string[];
  out: string;
  tmp: string;
}

/** The libraries of `specs` that are available and out of date (all with force). */
function outOfDate(specs: LibrarySpec[], force: boolean): BuildStep[] {
  const steps: BuildStep[] = [];
  for (const spec of specs) {
    if (!spec.available()) continue;
    const { hash, sources } = sourceHash(spec);
    const out = join(BUILD_DIR, spec.name);
    let current = "";
    try {
      current = Deno.readTextFileSync(out + ".hash").trim();
      Deno.statSync(out);
    } catch {
      current = "";
    }
    if (!force && current === hash) continue;
    steps.push({ spec, hash, sources, out, tmp: `${out}.tmp-${Deno.pid}` });
  }
  return steps;
}

/** Puts a built library in place, then its hash (a reader never sees a hash without its library). */
function install(step: BuildStep): void {
  Deno.renameSync(step.tmp, step.out);
  const hashFile = step.out + ".hash";
  Deno.writeTextFileSync(hashFile + `.tmp-${Deno.pid}`, step.hash + "\n");
  Deno.renameSync(hashFile + `.tmp-${Deno.pid}`, hashFile);
}

function failed(step: BuildStep, cmd: string, code: number): Error {
  try {
    Deno.removeSync(step.tmp);
  } catch { /* nothing was written */ }
  return new Error(`Cannot build ${step.spec.name}: ${cmd} exited with code ${code}`);
}

/** Options of a build: which parts (default: every available library), rebuild all, silence. */
export interface BuildOptions {
  force?: boolean;
  quiet?: boolean;
  /** the parts to build (docs/BUILD.md); the CPU part is always among them */
  parts?: readonly BuildPart[];
}

/**
 * Builds the libraries of `opts.parts` (default: every available one) that
 * are out of date, one compiler run each; returns the built names. Tests call
 * this (synchronously) to be sure what they load is current.
 */
export function buildNative(opts: BuildOptions = {}): string[] {
  Deno.mkdirSync(BUILD_DIR, { recursive: true });
  const built: string[] = [];
  for (
    const step of outOfDate(
      opts.parts ? librariesFor(opts.parts) : DEFAULT_LIBRARIES(),
      !!opts.force,
    )
  ) {
    const { spec } = step;
    const [cmd, ...args] = spec.command(step.tmp, step.hash, step.sources);
    if (spec.buildArgs) args.unshift(...spec.buildArgs());
    if (!opts.quiet) {
      console.error(`dtrain: building ${spec.name} (${step.sources.length} sources)`);
    }
    const r = new Deno.Command(cmd!, {
      args,
      cwd: ROOT,
      stdout: "inherit",
      stderr: spec.report ? "piped" : "inherit",
    }).outputSync();
    if (spec.report) {
      const text = new TextDecoder().decode(r.stderr);
      Deno.writeTextFileSync(join(BUILD_DIR, spec.name + spec.report), text);
      if (!r.success) console.error(text);
    }
    if (!r.success) throw failed(step, cmd!, r.code);
    install(step);
    built.push(spec.name);
  }
  return built;
}

/**
 * Builds library `name` with extra compiler flags (a test build's `-D…`,
 * which selects code the normal build leaves out) into `outDir`, whatever
 * build/ holds; returns its path. For tests that load it through
 * DTRAIN_LIB_DIR.
 */
export function buildVariant(name: string, outDir: string, extraFlags: readonly string[]): string {
  const spec = LIBRARIES.find((l) => l.name === name);
  if (!spec) throw new Error(`no native library is named ${name}`);
  const { hash, sources } = sourceHash(spec);
  const out = join(outDir, name);
  const [cmd, ...args] = spec.command(out, `${hash}-variant`, sources);
  if (spec.buildArgs) args.unshift(...spec.buildArgs());
  const r = new Deno.Command(cmd!, { args: [...extraFlags, ...args], cwd: ROOT }).outputSync();
  if (!r.success) {
    throw new Error(
      `Cannot build ${name} with ${extraFlags.join(" ")}: ${cmd} exited with code ${r.code}\n` +
        new TextDecoder().decode(r.stderr),
    );
  }
  return out;
}

/** Compiler runs at once: DTRAIN_BUILD_JOBS, else every core. */
export function buildJobs(): number {
  const n = Number(Deno.env.get("DTRAIN_BUILD_JOBS") ?? navigator.hardwareConcurrency ?? 1);
  return Number.isInteger(n) && n >= 1 ? n : 1;
}

/**
 * gcc's or g++'s one-run command for a library split into one compile per
 * source (same flags, `-c`) and a link of the objects (the same command with
 * the objects in place of the sources). nvcc keeps its one run (its own
 * --threads).
 */
export function splitCommand(
  argv: readonly string[],
  sources: readonly string[],
  objectOf: (source: string) => string,
): { compile: string[][]; link: string[] } | null {
  const cc = argv[0]!;
  if (cc !== "gcc" && cc !== "g++") return null;
  const isSource = new Set(sources);
  const compileFlags: string[] = [];
  const link: string[] = [cc];
  let lang: string | null = null;
  /** the -x language in effect at the sources (g++ compiles kernels/cuda/*.cu as C++) */
  let sourceLang: string | null = null;
  let objectsPlaced = false;
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "-x") {
      const l = argv[++i]!;
      lang = l === "none" ? null : l;
      continue; // the objects are linked as objects
    }
    if (a === "-o") {
      link.push(a, argv[++i]!);
      continue;
    }
    if (isSource.has(a)) {
      sourceLang ??= lang;
      if (!objectsPlaced) link.push(...sources.map(objectOf));
      objectsPlaced = true;
      continue;
    }
    link.push(a);
    const linkOnly = a === "-shared" || a.startsWith("-l") || a.startsWith("-L") ||
      a.startsWith("-Wl,");
    if (!linkOnly) compileFlags.push(a);
  }
  const xlang = sourceLang ? ["-x", sourceLang] : [];
  const compile = sources.map((
    src,
  ) => [cc, ...compileFlags, ...xlang, "-c", src, "-o", objectOf(src)]);
  return { compile, link };
}

/** A progress line: rewritten in place on a terminal, else printed at each quarter. */
function progress(quiet: boolean) {
  const tty = Deno.stderr.isTerminal();
  const enc = new TextEncoder();
  let open = false;
  return {
    line(text: string, k: number, n: number) {
      if (quiet) return;
      if (tty) {
        Deno.stderr.writeSync(enc.encode(`\r\x1b[K${text}`));
        open = true;
      } else if (k === n || k === 1 || Math.floor((4 * k) / n) !== Math.floor((4 * (k - 1)) / n)) {
        console.error(text);
      }
    },
    done() {
      if (open) Deno.stderr.writeSync(enc.encode("\n"));
      open = false;
    },
  };
}

/** Runs `commands` from the repository root, `jobs` at a time; calls `each` as each ends. */
async function runPool(
  commands: string[][],
  jobs: number,
  each: (done: number) => void,
): Promise<void> {
  let next = 0, done = 0;
  let failure: Error | null = null;
  const worker = async () => {
    while (next < commands.length && !failure) {
      const [cmd, ...args] = commands[next++]!;
      const r = await new Deno.Command(cmd!, {
        args,
        cwd: ROOT,
        stdout: "inherit",
        stderr: "inherit",
      })
        .output();
      if (!r.success) {
        failure ??= new Error(
          `${cmd} ${
            args.filter((a) => !a.startsWith("-")).at(-2) ?? ""
          } exited with code ${r.code}`,
        );
      }
      each(++done);
    }
  };
  await Promise.all(Array.from({ length: Math.min(jobs, commands.length) }, worker));
  if (failure) throw failure;
}

/**
 * buildNative with every gcc/g++ source compiled on its own, `buildJobs()`
 * at a time, and a line per library with its progress ("compiling k/N"):
 * what the `dtrain` command and the test script run.
 */
export async function buildNativeParallel(opts: BuildOptions = {}): Promise<string[]> {
  Deno.mkdirSync(BUILD_DIR, { recursive: true });
  const built: string[] = [];
  const jobs = buildJobs();
  const show = progress(!!opts.quiet);
  for (
    const step of outOfDate(
      opts.parts ? librariesFor(opts.parts) : DEFAULT_LIBRARIES(),
      !!opts.force,
    )
  ) {
    const { spec } = step;
    const argv = spec.command(step.tmp, step.hash, step.sources);
    const objDir = join(BUILD_DIR, "obj", `${spec.name}-${step.hash}`);
    const objectOf = (src: string) => join(objDir, src.replaceAll("/", "__") + ".o");
    const split = spec.buildArgs ? null : splitCommand(argv, step.sources, objectOf);
    const label = `dtrain: building ${spec.name}`;
    if (!opts.quiet) {
      console.error(
        split
          ? `${label}: ${step.sources.length} sources, ${
            Math.min(jobs, step.sources.length)
          } at a time`
          : `${label} (${step.sources.length} sources${
            spec.name === "libdtrain_cuda.so" ? ", nvcc: minutes" : ""
          })`,
      );
    }
    const t0 = performance.now();
    if (split) {
      Deno.mkdirSync(objDir, { recursive: true });
      const n = split.compile.length;
      // the largest sources first: the last to finish is then a small one, not the GEMM
      const size = (cmd: string[]) => Deno.statSync(join(ROOT, cmd[cmd.indexOf("-c") + 1]!)).size;
      const order = [...split.compile].sort((a, b) => size(b) - size(a));
      await runPool(order, jobs, (k) => show.line(`${label}: compiling ${k}/${n}`, k, n));
      show.done();
      const [cmd, ...args] = split.link;
      const r = await new Deno.Command(cmd!, {
        args,
        cwd: ROOT,
        stdout: "inherit",
        stderr: "inherit",
      }).output();
      if (!r.success) throw failed(step, cmd!, r.code);
      Deno.removeSync(objDir, { recursive: true });
      try {
        Deno.removeSync(join(BUILD_DIR, "obj")); // when no other build is using it
      } catch { /* another build's objects are there */ }
    } else {
      const [cmd, ...args] = argv;
      if (spec.buildArgs) args.unshift(...spec.buildArgs());
      const r = await new Deno.Command(cmd!, {
        args,
        cwd: ROOT,
        stdout: "inherit",
        stderr: spec.report ? "piped" : "inherit",
      }).output();
      if (spec.report) {
        const text = new TextDecoder().decode(r.stderr);
        Deno.writeTextFileSync(join(BUILD_DIR, spec.name + spec.report), text);
        if (!r.success) console.error(text);
      }
      if (!r.success) throw failed(step, cmd!, r.code);
    }
    install(step);
    if (!opts.quiet) {
      console.error(`${label}: done in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
    built.push(spec.name);
  }
  return built;
}

export { hasCommand };

if (import.meta.main) {
  const args = [...Deno.args];
  const jobAt = args.indexOf("--job");
  const own = jobAt >= 0 ? args.slice(0, jobAt) : args;
  const force = own.includes("--force");
  const quiet = own.includes("--quiet");
  const forAt = own.findIndex((a) => a === "--for" || a.startsWith("--for="));
  let parts: BuildPart[] | undefined;
  try {
    if (jobAt >= 0) parts = partsForJob(args.slice(jobAt + 1));
    else if (forAt >= 0) {
      const a = own[forAt]!;
      parts = parseParts(a.includes("=") ? a.slice(a.indexOf("=") + 1) : own[forAt + 1] ?? "");
    }
    await buildNativeParallel({ force, quiet: quiet && jobAt < 0, parts });
  } catch (e) {
    console.error(`dtrain: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
