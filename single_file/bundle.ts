/**
 * Bundling dtrain's TypeScript into the JavaScript the single file runs with
 * `deno run --no-config`-style isolation: one esbuild pass over every entry
 * with code splitting, so the rank bootstrap and the library a user's script
 * imports share one copy of each module (one store, one phase sink).
 */
import * as esbuild from "esbuild";
import { join } from "node:path";

/** The bundle's entries: output name (js/<name>.js) -> source file in the checkout. */
export const BUNDLE_ENTRIES = {
  /** the `dtrain` command: checks the extraction, then runs cli.ts */
  dtrain: "single_file/entry.ts",
  /** the rank bootstrap, loaded with --preload: checks the extraction, then bootstraps the rank */
  rank_main: "launch/rank_main.ts",
  /** `dtrain check`'s probe, preloaded into a run without the launcher */
  probe_main: "check/probe_main.ts",
  /** the library; deno.json maps "dtrain" to it */
  mod: "mod.ts",
  /** run once after unpacking: the full sha256 check */
  verify: "single_file/verify_main.ts",
  /** workers the library starts (os/install_layout.ts WORKER_MODULES) */
  sync_store_worker: "distributed/control/sync_store_worker.ts",
  nccl_watchdog_worker: "distributed/backends/nccl_watchdog_worker.ts",
  checkpoint_commit_worker: "train/checkpoint/commit_worker.ts",
} as const;

const COMMON: esbuild.BuildOptions = {
  bundle: true,
  format: "esm",
  platform: "neutral",
  mainFields: ["module", "main"],
  target: "esnext",
  // Node built-ins are Deno's own; everything else (zod included) is bundled.
  external: ["node:*"],
  // No bundled module is the main one: entries run their work unconditionally,
  // and a module's `if (import.meta.main)` block must not fire inside an entry.
  define: { "import.meta.main": "false" },
  logLevel: "warning",
  metafile: true,
};

/**
 * Bundles BUNDLE_ENTRIES from `root` (a checkout) into `outdir`; returns the
 * files written, relative to outdir.
 *
 * @example
 * ```ts
 * await bundleDtrain("/repo", "/tmp/stage/root/js"); // ["dtrain.js", "mod.js", "chunk-….js", …]
 * ```
 */
export async function bundleDtrain(root: string, outdir: string): Promise<string[]> {
  const entryPoints = Object.fromEntries(
    Object.entries(BUNDLE_ENTRIES).map(([name, src]) => [name, join(root, src)]),
  );
  const result = await esbuild.build({
    ...COMMON,
    entryPoints,
    splitting: true,
    outdir,
    chunkNames: "chunk-[hash]",
    absWorkingDir: root,
  });
  return Object.keys(result.metafile!.outputs).map((p) => p.slice(p.lastIndexOf("/") + 1)).sort();
}

/**
 * Bundles scripts that run on their own (with `dtrain exec`): `entries`
 * (output name -> source file in `root`) with code splitting into `outdir`,
 * everything they import included. Returns the files written.
 *
 * @example
 * ```ts
 * await bundleScripts("/repo", { ops_vs_cpu: "scripts/gpu_check/ops_vs_cpu.ts" }, "/out/js");
 * ```
 */
export async function bundleScripts(
  root: string,
  entries: Record<string, string>,
  outdir: string,
): Promise<string[]> {
  const result = await esbuild.build({
    ...COMMON,
    entryPoints: Object.fromEntries(
      Object.entries(entries).map(([name, src]) => [name, join(root, src)]),
    ),
    splitting: true,
    outdir,
    chunkNames: "chunk-[hash]",
    absWorkingDir: root,
  });
  return Object.keys(result.metafile!.outputs).map((p) => p.slice(p.lastIndexOf("/") + 1)).sort();
}

/**
 * Bundles a script that the launcher runs as each rank's main module (under
 * the single file's rank bootstrap) into `outfile`: "dtrain" stays an import,
 * which the single file's import map resolves to its library, so the script
 * shares the library the bootstrap set up (a copy of its own would start
 * without the rank's store); `import.meta.main` keeps its meaning. Returns
 * the checkout files bundled in, relative to `root`.
 *
 * @example
 * ```ts
 * await bundleRankScript("/repo", "parity/syncbn_rank.ts", "/out/js/syncbn_rank.js");
 * // ["io/safetensors.ts", …, "parity/syncbn_rank.ts"]
 * ```
 */
export async function bundleRankScript(
  root: string,
  source: string,
  outfile: string,
): Promise<string[]> {
  const result = await esbuild.build({
    ...COMMON,
    define: {},
    external: ["node:*", "dtrain"],
    entryPoints: [join(root, source)],
    outfile,
    absWorkingDir: root,
  });
  return Object.keys(result.metafile!.inputs).sort();
}

/** Bundles single_file/compiled_main.ts alone into `outfile` (the program `deno compile` embeds). */
export async function bundleCompiledMain(root: string, outfile: string): Promise<void> {
  await esbuild.build({
    ...COMMON,
    entryPoints: [join(root, "single_file", "compiled_main.ts")],
    outfile,
    absWorkingDir: root,
  });
}

/** Stops esbuild's service process so the build can exit. */
export async function stopBundler(): Promise<void> {
  await esbuild.stop();
}
