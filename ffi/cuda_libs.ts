/**
 * Where the NVIDIA libraries that dtrain opens at run time are looked for —
 * the driver (libcuda), cuBLASLt and NCCL, plus libcudart for `dtrain doctor`
 * — and the search itself: LD_LIBRARY_PATH, CUDA_HOME, the usual system
 * folders, the folders of the dynamic loader's cache (`ldconfig -p`), then
 * the lib folders of pip's nvidia-* packages (`nvidia/<package>/lib`, e.g.
 * nvidia/nccl/lib, nvidia/cu13/lib) in the site-packages of the active
 * virtual environment (VIRTUAL_ENV), conda environment (CONDA_PREFIX), every
 * python3 on PATH, and every other python3 installation on the machine
 * (/usr, /usr/local, /opt/*, conda and pyenv installations under /opt and
 * HOME), found by listing folders; no Python is run. A miss names every folder
 * tried.
 */
import { dirname, join } from "node:path";

/** The libraries, each as the file names tried in order (newest first). */
export const CUDA_LIBRARY_FILES = {
  /** the NVIDIA driver's user-space library (needed by everything on the GPU) */
  driver: ["libcuda.so.1", "libcuda.so"],
  /** cuBLASLt, opened by libdtrain_cuda.so for dt_gemm */
  cublasLt: ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
  /** NCCL, opened by ffi/nccl.ts for the process group of several GPU ranks */
  nccl: ["libnccl.so.2", "libnccl.so"],
  /** the CUDA runtime; libdtrain_cuda.so links it statically, so only `doctor` reports it */
  cudart: ["libcudart.so.13", "libcudart.so.12", "libcudart.so"],
} as const;

/** A library's role in CUDA_LIBRARY_FILES. */
export type CudaLibraryRole = keyof typeof CUDA_LIBRARY_FILES;

/** What a search found: the first matching file (or null) and every folder tried. */
export interface LibrarySearchResult {
  role: CudaLibraryRole;
  files: readonly string[];
  path: string | null;
  tried: string[];
}

/** Where to search; tests pass their own environment and folders. */
export interface LibrarySearchOptions {
  /** environment lookup (default: Deno.env) */
  env?: (name: string) => string | undefined;
  /** folders searched after the environment's (default: SYSTEM_LIBRARY_DIRS) */
  systemDirs?: readonly string[];
  /** folders that may hold python's site-packages (default: PYTHON_PREFIXES plus ~/.local) */
  pythonPrefixes?: readonly string[];
  /** folders whose children may each be a python installation (default: pythonRoots(HOME)
   *  when pythonPrefixes is not given, else none) */
  pythonRoots?: readonly string[];
  /** the text of `ldconfig -p` (default: run it once, "" when it cannot run; none when
   *  systemDirs is given) */
  ldconfig?: () => string;
}

/** The usual places of the driver and of a CUDA toolkit on Linux. */
export const SYSTEM_LIBRARY_DIRS: readonly string[] = [
  "/usr/local/cuda/lib64",
  "/usr/local/cuda/targets/x86_64-linux/lib",
  "/usr/local/nvidia/lib64", // the driver, as container runtimes mount it
  "/usr/local/nvidia/lib",
  "/usr/lib/x86_64-linux-gnu",
  "/lib/x86_64-linux-gnu",
  "/usr/lib64",
  "/usr/lib",
  "/usr/lib/wsl/lib", // the driver under WSL 2
];

/** Python installations whose site-packages may hold pip's nvidia-* wheels. */
export const PYTHON_PREFIXES: readonly string[] = ["/usr", "/usr/local", "/opt/conda"];

/**
 * Folders whose children are often python installations: /opt/<name>, conda
 * environments, pyenv versions, virtual environments kept under HOME; and
 * HOME itself (~/miniconda3, ~/anaconda3, ~/miniforge3, ~/.venv, ~/venv).
 */
export function pythonRoots(home: string | undefined): string[] {
  const roots = ["/opt", "/opt/conda/envs"];
  if (home) {
    roots.push(home, join(home, ".pyenv", "versions"), join(home, ".virtualenvs"));
    for (const c of ["miniconda3", "anaconda3", "miniforge3", "mambaforge", ".conda"]) {
      roots.push(join(home, c, "envs"));
    }
  }
  return roots;
}

/** The children of `roots` that are python installations (hold bin/python3 or bin/python3.X). */
export function pythonPrefixesUnder(roots: readonly string[]): string[] {
  const out: string[] = [];
  for (const root of roots) {
    for (const name of readDirNames(root)) {
      const prefix = join(root, name);
      if (readDirNames(join(prefix, "bin")).some((n) => /^python3(\.\d+)?$/.test(n))) {
        out.push(prefix);
      }
    }
  }
  return out;
}

function readDirNames(dir: string): string[] {
  try {
    return [...Deno.readDirSync(dir)].map((e) => e.name).sort();
  } catch {
    return [];
  }
}

function isDir(path: string): boolean {
  try {
    return Deno.statSync(path).isDirectory;
  } catch {
    return false;
  }
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile; // follows symlinks, as dlopen does
  } catch {
    return false;
  }
}

let ldconfigText: string | undefined;

/** `ldconfig -p` of this machine (read once), or "" where it cannot run. */
function systemLdconfig(): string {
  if (ldconfigText !== undefined) return ldconfigText;
  ldconfigText = "";
  for (const cmd of ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]) {
    try {
      const r = new Deno.Command(cmd, { args: ["-p"], stdout: "piped", stderr: "null" })
        .outputSync();
      if (r.success) {
        ldconfigText = new TextDecoder().decode(r.stdout);
        break;
      }
    } catch { /* not this one */ }
  }
  return ldconfigText;
}

/**
 * The folders of the libraries in `ldconfig -p`'s output, in its order
 * ("\tlibcuda.so.1 (libc6,x86-64) => /usr/lib64/libcuda.so.1" gives /usr/lib64).
 *
 * @example
 * ```ts
 * ldconfigDirs("\tlibnccl.so.2 (libc6,x86-64) => /opt/nccl/lib/libnccl.so.2"); // ["/opt/nccl/lib"]
 * ```
 */
export function ldconfigDirs(text: string): string[] {
  const dirs: string[] = [];
  for (const line of text.split("\n")) {
    const at = line.indexOf("=> ");
    if (at < 0) continue;
    const path = line.slice(at + 3).trim();
    if (path.startsWith("/")) dirs.push(dirname(path));
  }
  return [...new Set(dirs)];
}

/** The prefixes of the python3 interpreters on PATH: a venv's bin/python3 gives the venv. */
function pathPythonPrefixes(path: string): string[] {
  const prefixes: string[] = [];
  for (const dir of path.split(":").filter((d) => d !== "")) {
    if (readDirNames(dir).some((n) => /^python3(\.\d+)?$/.test(n))) prefixes.push(dirname(dir));
  }
  return prefixes;
}

/** `nvidia/<package>/lib` folders under every site-packages of the given prefixes. */
export function pipNvidiaLibDirs(prefixes: readonly string[]): string[] {
  const out: string[] = [];
  for (const prefix of prefixes) {
    const sites: string[] = [];
    for (const lib of ["lib", "lib64"]) {
      const libDir = join(prefix, lib);
      sites.push(join(libDir, "python3", "dist-packages"));
      for (const name of readDirNames(libDir)) {
        if (!/^python3(\.\d+)?$/.test(name)) continue;
        sites.push(join(libDir, name, "site-packages"), join(libDir, name, "dist-packages"));
      }
    }
    for (const site of sites) {
      const nvidia = join(site, "nvidia");
      for (const pkg of readDirNames(nvidia)) {
        const lib = join(nvidia, pkg, "lib");
        if (isDir(lib)) out.push(lib);
      }
    }
  }
  return out;
}

/**
 * Every folder searched, in order, without duplicates.
 *
 * @example
 * ```ts
 * const dirs = cudaLibraryDirs({ env: (n) => ({ LD_LIBRARY_PATH: "/opt/lib" })[n] });
 * // ["/opt/lib", "/usr/local/cuda/lib64", ...]
 * ```
 */
export function cudaLibraryDirs(opts: LibrarySearchOptions = {}): string[] {
  const env = opts.env ?? ((n: string) => Deno.env.get(n));
  const dirs: string[] = [];
  for (const d of (env("LD_LIBRARY_PATH") ?? "").split(":")) if (d) dirs.push(d);
  for (const v of ["CUDA_HOME", "CUDA_PATH"]) {
    const home = env(v);
    if (home) dirs.push(join(home, "lib64"), join(home, "lib"));
  }
  const conda = env("CONDA_PREFIX");
  if (conda) dirs.push(join(conda, "lib"));
  dirs.push(...(opts.systemDirs ?? SYSTEM_LIBRARY_DIRS));
  // A caller that chose the system folders (a test) chooses the loader cache too.
  const ldconfig = opts.ldconfig ?? (opts.systemDirs === undefined ? systemLdconfig : () => "");
  dirs.push(...ldconfigDirs(ldconfig()));
  const home = env("HOME");
  const roots = opts.pythonRoots ?? (opts.pythonPrefixes === undefined ? pythonRoots(home) : []);
  const prefixes = [
    // the environment this process runs in first: a venv, then a conda environment
    ...[env("VIRTUAL_ENV"), conda].filter((p): p is string => !!p),
    ...pathPythonPrefixes(env("PATH") ?? ""),
    ...(opts.pythonPrefixes ?? PYTHON_PREFIXES),
    ...(opts.pythonPrefixes === undefined && home ? [join(home, ".local")] : []),
    ...pythonPrefixesUnder(roots),
  ];
  dirs.push(...pipNvidiaLibDirs(prefixes));
  return [...new Set(dirs)];
}

/**
 * Looks for the library of `role`: the first folder that holds any of its
 * file names (tried newest first within a folder) wins.
 *
 * @example
 * ```ts
 * const r = findCudaLibrary("cublasLt");
 * if (!r.path) console.error(describeMissing(r));
 * ```
 */
export function findCudaLibrary(
  role: CudaLibraryRole,
  opts: LibrarySearchOptions = {},
  files: readonly string[] = CUDA_LIBRARY_FILES[role],
): LibrarySearchResult {
  const tried = cudaLibraryDirs(opts);
  for (const dir of tried) {
    for (const f of files) {
      const path = join(dir, f);
      if (isFile(path)) return { role, files, path, tried };
    }
  }
  return { role, files, path: null, tried };
}

/** "libnccl.so.2 (or libnccl.so) not found; looked in /a, /b" */
export function describeMissing(r: LibrarySearchResult): string {
  const [first, ...rest] = r.files;
  const names = rest.length ? `${first} (or ${rest.join(", ")})` : first;
  const where = r.tried.length ? r.tried.join(", ") : "(no folders)";
  return `${names} not found; looked in ${where}`;
}
