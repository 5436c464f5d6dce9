/**
 * Which environment variables change what a run computes, and why: the one
 * table that decides what `run.json` records (`behaviourEnv` in record.ts)
 * and how `dtrain diff` explains and ranks a differing variable.
 */

/**
 * How a variable can change a run, most to least likely to explain a
 * difference in losses:
 * - `numeric`: changes summation order or precision (last-bit differences);
 * - `selection`: changes which library, device or code path runs;
 * - `tuning`: changes transports, timeouts or buffering; rarely the numbers;
 * - `cosmetic`: changes only text output (logs, timestamps).
 */
export type EnvEffect = "numeric" | "selection" | "tuning" | "cosmetic";

/** One row of the table: a variable name (or `PREFIX*`) and what it does. */
export interface EnvRule {
  /** an exact name, or a prefix ending in `*` */
  pattern: string;
  effect: EnvEffect;
  /** why it is recorded; `dtrain diff` prints it as the explanation */
  why: string;
}

/**
 * The recorded variables. The first matching row wins, so exact names come
 * before the prefixes that would also match them.
 */
export const ENV_RULES: readonly EnvRule[] = [
  {
    pattern: "DTRAIN_NUM_THREADS",
    effect: "numeric",
    why:
      "kernel thread count changes how GEMM and reductions split their sums → last-bit differences",
  },
  {
    pattern: "DTRAIN_CPU_ISA",
    effect: "numeric",
    why: "caps the CPU GEMM kernel (avx512/avx2/generic): FMA and blocking change rounding",
  },
  {
    pattern: "DTRAIN_SHM_CHUNK_BYTES",
    effect: "numeric",
    why: "chunk size of the shared-memory all-reduce can change its reduction order",
  },
  {
    pattern: "DTRAIN_CPU_BACKEND",
    effect: "numeric",
    why: "shared memory or Gloo for CPU ranks: they add the ranks' values in different orders",
  },
  {
    pattern: "DTRAIN_GLOO_HIERARCHY",
    effect: "numeric",
    why:
      "Gloo all-reduce through each machine's shared memory first or not: another summation order",
  },
  {
    pattern: "GLOO_SOCKET_IFNAME",
    effect: "selection",
    why: "picks the network interface of Gloo's connections between machines",
  },
  {
    pattern: "OMP_NUM_THREADS",
    effect: "numeric",
    why: "OpenMP thread count of linked native code changes summation order",
  },
  {
    pattern: "MKL_NUM_THREADS",
    effect: "numeric",
    why: "thread count of an optional system BLAS (MKL) changes summation order",
  },
  {
    pattern: "OPENBLAS_NUM_THREADS",
    effect: "numeric",
    why: "thread count of an optional system BLAS (OpenBLAS) changes summation order",
  },
  {
    pattern: "NVIDIA_TF32_OVERRIDE",
    effect: "numeric",
    why: "forces TF32 on or off in cuBLAS: matmul precision changes",
  },
  {
    pattern: "CUBLAS_WORKSPACE_CONFIG",
    effect: "numeric",
    why: "cuBLAS workspace; :4096:8 or :16:8 makes cuBLAS results deterministic",
  },
  {
    pattern: "NCCL_ALGO",
    effect: "numeric",
    why: "NCCL all-reduce algorithm (ring/tree/NVLS) changes the reduction order",
  },
  {
    pattern: "NCCL_PROTO",
    effect: "numeric",
    why: "NCCL protocol changes chunking and so the reduction order",
  },
  {
    pattern: "DTRAIN_LIB_DIR",
    effect: "selection",
    why: "picks which native kernel library is loaded",
  },
  { pattern: "DTRAIN_CUDA", effect: "selection", why: "turns the CUDA library build on or off" },
  { pattern: "CUDA_VISIBLE_DEVICES", effect: "selection", why: "picks which GPUs the ranks use" },
  {
    pattern: "CUDA_DEVICE_ORDER",
    effect: "selection",
    why: "changes which physical GPU each device index names",
  },
  {
    pattern: "CUDA_LAUNCH_BLOCKING",
    effect: "selection",
    why: "serialises kernel launches: slower, and hides or reveals races",
  },
  {
    pattern: "LD_LIBRARY_PATH",
    effect: "selection",
    why: "picks which CUDA, cuBLAS and NCCL libraries are loaded",
  },
  { pattern: "LD_PRELOAD", effect: "selection", why: "injects a shared library into every rank" },
  {
    pattern: "DENO_V8_FLAGS",
    effect: "selection",
    why: "V8 flags change JIT tiers and other behaviour of the TypeScript side",
  },
  { pattern: "DTRAIN_LOG_RANKS", effect: "cosmetic", why: "only which ranks' output is shown" },
  { pattern: "DTRAIN_*", effect: "tuning", why: "a dtrain setting" },
  {
    pattern: "NCCL_*",
    effect: "tuning",
    why: "NCCL transport or tuning setting: timing, sometimes the reduction order",
  },
  { pattern: "TORCH_*", effect: "tuning", why: "read by a PyTorch reference run, not by dtrain" },
  { pattern: "TZ", effect: "cosmetic", why: "time zone of printed timestamps" },
  { pattern: "LANG", effect: "cosmetic", why: "locale of printed text" },
  { pattern: "LC_ALL", effect: "cosmetic", why: "locale of printed text" },
];

/**
 * Never recorded although a rule matches them: secrets (the store token
 * authenticates the run; anything named like a token or secret may be
 * one), and dtrain's per-run identity variables, which differ on every run
 * or attempt by construction and are recorded elsewhere in run.json.
 */
export const ENV_EXCLUDED: readonly string[] = [
  "DTRAIN_STORE_TOKEN",
  "*TOKEN*",
  "*SECRET*",
  "*PASSWORD*",
  "*CREDENTIAL*",
  "DTRAIN_RUN_ID",
  "DTRAIN_RUN_DIR",
  "DTRAIN_LAUNCHER_PID",
  "DTRAIN_RESTART_COUNT",
];

function matches(pattern: string, name: string): boolean {
  const star = pattern.endsWith("*");
  const lead = pattern.startsWith("*");
  const core = pattern.slice(lead ? 1 : 0, star ? -1 : undefined);
  if (lead && star) return name.includes(core);
  if (star) return name.startsWith(core);
  return name === core;
}

/**
 * The rule that makes `name` worth recording, or null when it is not
 * recorded (no rule matches, or it is excluded as a secret or run identity).
 *
 * @example
 * ```ts
 * envRule("DTRAIN_NUM_THREADS")?.effect; // "numeric"
 * envRule("DTRAIN_STORE_TOKEN");         // null
 * ```
 */
export function envRule(name: string): EnvRule | null {
  const upper = name.toUpperCase();
  if (ENV_EXCLUDED.some((p) => matches(p, upper))) return null;
  return ENV_RULES.find((r) => matches(r.pattern, name)) ?? null;
}
