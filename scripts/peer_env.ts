/**
 * The peers of dtrain's benchmarks (PyTorch, torchrun, gloo, OpenBLAS) run at their best.
 *
 * Some machines set OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, because older OpenBLAS builds
 * misbehave on some processors without them. They make OpenBLAS, and PyTorch's CPU products
 * through it, run older kernels (AVX2 "Haswell" on a processor with AVX-512). Tests and dtrain
 * itself keep the environment as it is; a benchmark removes both from the peer's command only,
 * and says which kernel the peer then runs, so a ratio never rests on a handicapped peer.
 */

/** The variables that can slow a peer down, removed from every peer's environment. */
export const PEER_HANDICAPS = ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"] as const;

/**
 * Options for a `Deno.Command` that runs a peer: this process's environment without the
 * handicaps, plus `extra`. (`env` alone would merge into the inherited environment, where the
 * variables would survive, so the environment is given whole with `clearEnv`.)
 */
export function peerCommandEnv(
  extra: Record<string, string> = {},
): { env: Record<string, string>; clearEnv: true } {
  const env = Deno.env.toObject();
  for (const name of PEER_HANDICAPS) delete env[name];
  return { env: { ...env, ...extra }, clearEnv: true };
}

/**
 * Removes the handicaps from this process's own environment, for a peer loaded into it
 * (bench_gemm's OpenBLAS, which reads them when it is loaded). dtrain's kernels never read them.
 */
export function dropHandicapsInProcess(): void {
  for (const name of PEER_HANDICAPS) Deno.env.delete(name);
}

/** The handicaps this machine sets, as `NAME=value` (empty when none is set). */
export function handicapsSet(): string[] {
  return PEER_HANDICAPS.flatMap((name) => {
    const value = Deno.env.get(name);
    return value === undefined ? [] : [`${name}=${value}`];
  });
}

/** A line for a benchmark's header saying how the peers' environment differs from dtrain's. */
export function peerEnvLine(): string {
  const set = handicapsSet();
  return set.length === 0
    ? "peer environment: neither OPENBLAS_CORETYPE nor OPENBLAS_L2_SIZE is set on this machine"
    : `peer environment: ${
      set.join(", ")
    } unset for the peers only (dtrain and the tests keep them)`;
}

/** What a Python peer runs its CPU matrix products with, measured in a process started as a peer. */
export interface TorchBlas {
  torch: string;
  /** the BLAS library loaded into the peer's process, null when none was found */
  library: string | null;
  /** OpenBLAS's own name for the kernel it chose (openblas_get_corename), null where unknown */
  core: string | null;
  /** max |torch f32 product − f64 product| / max |f64 product| for a 256³ product */
  relErr: number;
}

const TORCH_BLAS_PY = String.raw`
import ctypes, json, torch
torch.manual_seed(0)
a = torch.randn(256, 256); b = torch.randn(256, 256)
ref = a.double() @ b.double()
err = ((a @ b).double() - ref).abs().max().item() / ref.abs().max().item()
lib = None
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    name = path.rsplit("/", 1)[-1]
    if name.startswith(("libopenblas", "libblas.so", "libmkl_rt")):
        lib = path
        break
core = None
if lib is not None:
    try:
        f = ctypes.CDLL(lib).openblas_get_corename
        f.restype = ctypes.c_char_p
        core = f().decode()
    except Exception:
        core = None
print(json.dumps({"torch": torch.__version__, "library": lib, "core": core, "relErr": err}))
`;

/** Runs `python` as a peer (handicaps removed) and reports its BLAS; null when torch is missing. */
export async function torchBlas(python: string): Promise<TorchBlas | null> {
  try {
    const out = await new Deno.Command(python, {
      args: ["-c", TORCH_BLAS_PY],
      ...peerCommandEnv({ OMP_NUM_THREADS: "1" }),
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!out.success) return null;
    return JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").at(-1)!);
  } catch {
    return null;
  }
}

/**
 * The header line naming the peer's kernel, and refusing a peer whose products are wrong: a
 * result worse than f32 rounding can explain (256 terms, each product rounded: well under 1e-4
 * of the largest output) means the kernel it runs is broken, and its times mean nothing.
 */
export async function torchPeerLine(python: string): Promise<string> {
  const blas = await torchBlas(python);
  if (blas === null) return `PyTorch peer (${python}): torch not importable`;
  if (!(blas.relErr < 1e-4)) {
    throw new Error(
      `PyTorch peer's matrix product is wrong (relative error ${blas.relErr}, core ` +
        `${blas.core ?? "?"}): its timings would mean nothing`,
    );
  }
  const where = blas.library ?? "no OpenBLAS/BLAS library loaded (its own kernels)";
  return `PyTorch ${blas.torch} peer: BLAS ${where}, core ${blas.core ?? "?"}, ` +
    `256³ product right (relative error ${blas.relErr.toExponential(1)})`;
}
