/**
 * How this dtrain is installed: a checkout (TypeScript sources, native
 * libraries in build/) or the single file's extraction folder (bundled
 * JavaScript in js/, libraries in lib/), and the files another dtrain process
 * (a rank) is started with, so both layouts spawn ranks the same way. The
 * bottom of the tree: loading a native library asks it where to look, and it
 * knows nothing of how the single file is packed (single_file/) or verified
 * (single_file_manifest.ts).
 */
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** Where dtrain's own files are, for the layout this process runs from. */
export interface InstallLayout {
  kind: "checkout" | "single-file";
  /** the checkout, or the extraction folder of the single file */
  root: string;
  /** the deno.json every dtrain process runs with (it maps "dtrain" to the library) */
  config: string;
  /** the rank bootstrap, loaded with `deno run --preload` before the user's script */
  rankMain: string;
  /** the `dtrain` command's module, for starting another `dtrain` (cli.ts or its bundle) */
  cli: string;
  /** `dtrain check`'s probe, preloaded into a run of the user's script without the launcher */
  probeMain: string;
  /** the folder of the native libraries shipped with this dtrain */
  libDir: string;
}

/**
 * Modules that run in Deno workers (started by the library at run time, so
 * they are found by path): where each is in a checkout, and its name in the
 * single file's bundle (single_file/bundle.ts makes it an entry of its own).
 */
export const WORKER_MODULES = {
  /** store calls for synchronous code (distributed/control/sync_store.ts) */
  syncStore: { source: "distributed/control/sync_store_worker.ts", bundled: "sync_store_worker" },
  /** the NCCL group's watchdog (distributed/backends/nccl_watchdog.ts) */
  ncclWatchdog: {
    source: "distributed/backends/nccl_watchdog_worker.ts",
    bundled: "nccl_watchdog_worker",
  },
  /** asynchronous checkpoint commits (train/checkpoint/background.ts) */
  checkpointCommit: {
    source: "train/checkpoint/commit_worker.ts",
    bundled: "checkpoint_commit_worker",
  },
} as const;

/**
 * The URL of a worker module of this dtrain (`fallback`, the caller's own
 * URL for it, when dtrain has no files of its own).
 *
 * @example
 * ```ts
 * new Worker(workerModuleUrl("syncStore", new URL("./sync_store_worker.ts", import.meta.url)), { type: "module" });
 * ```
 */
export function workerModuleUrl(name: keyof typeof WORKER_MODULES, fallback: URL): URL {
  const layout = installLayout();
  if (!layout) return fallback;
  const m = WORKER_MODULES[name];
  const path = layout.kind === "checkout"
    ? join(layout.root, m.source)
    : join(layout.root, "js", `${m.bundled}.js`);
  return pathToFileURL(path);
}

/** The variable the single file's start-up sets to the single file's own path. */
export const SFX_FILE_ENV = "DTRAIN_SFX_FILE";

/**
 * The layout of the dtrain this module belongs to, or null when dtrain was
 * imported from a non-file URL (then it has no files of its own on disk).
 *
 * Why the module's URL decides rather than an environment variable: in a
 * checkout this file is `<root>/os/install_layout.ts`; bundled, its code sits in a
 * chunk `<root>/js/<chunk>.js`, one folder below the extraction root as well.
 * The URL cannot be inherited by a process that runs a checkout from inside a
 * single-file run, while an environment variable would be.
 *
 * @example
 * ```ts
 * const layout = installLayout();
 * console.log(layout?.kind, layout?.rankMain); // "checkout" "/repo/launch/rank_main.ts"
 * ```
 */
export function installLayout(moduleUrl: string = import.meta.url): InstallLayout | null {
  if (!moduleUrl.startsWith("file:")) return null;
  const root = fileURLToPath(new URL("..", moduleUrl)).replace(/\/$/, "");
  if (moduleUrl.endsWith(".ts")) {
    return {
      kind: "checkout",
      root,
      config: join(root, "deno.json"),
      rankMain: join(root, "launch", "rank_main.ts"),
      cli: join(root, "cli.ts"),
      probeMain: join(root, "check", "probe_main.ts"),
      libDir: join(root, "build"),
    };
  }
  return {
    kind: "single-file",
    root,
    config: join(root, "deno.json"),
    rankMain: join(root, "js", "rank_main.js"),
    cli: join(root, "js", "dtrain.js"),
    probeMain: join(root, "js", "probe_main.js"),
    libDir: join(root, "lib"),
  };
}
