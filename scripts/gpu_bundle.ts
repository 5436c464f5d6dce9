/**
 * `deno task gpu-bundle`: dist/gpu-check/, dtrain's device check packed to
 * travel to a GPU machine like an air-gapped install — held to 50 MiB (64 MiB
 * is all that travels), and nothing needed there but sh, coreutils and the
 * NVIDIA driver (no network, node, npm or Deno):
 *
 *   dtrain        the single file, holding the CUDA library built here by nvcc
 *                 (sm_80 + sm_90 + PTX, cudart linked statically) and the emulated device
 *   run.sh        the driver: a table row per step as it ends, gpu-check.log; `--help` lists this
 *   steps/        its steps, one file each (scripts/gpu_check/steps/NN-*.sh), run in name order
 *   js/           the single-process checks, bundled (facts, ops vs CPU, parity,
 *                 benchmark, resume verdict), run with `dtrain exec`; and the rank scripts
 *                 the launcher runs, bundled with "dtrain" left to the single file's library
 *   scripts/      the launched checks, TypeScript on the public API (NCCL ranks, a training job)
 *   fixtures.tar.xz  the PyTorch parity fixtures and the repository's own fixtures/ (xz:
 *                 they are half JSON), unpacked by run.sh
 *   bench_gpt_torch.py  the PyTorch side of the benchmark
 *
 *   deno run -A scripts/gpu_bundle.ts [--out DIR] [--fixtures DIR] [--allow-no-cuda] [--quiet]
 */
import { basename, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { buildSingle } from "./build_single.ts";
import { bundleRankScript, bundleScripts, stopBundler } from "../single_file/bundle.ts";
import { defaultFixtureDir } from "../parity/fixtures.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** The size the bundle is held to: what travels to the lent GPU machine (64 MiB) with room. */
export const MAX_BUNDLE_BYTES = 50 * 2 ** 20;

/**
 * The size past which the build refuses: 64 MiB travel, the rest is room. Between this and
 * MAX_BUNDLE_BYTES the build warns (measured 2026-12-06: 47.6 MiB without the CUDA library, whose
 * sm_80 + sm_90 + PTX fat binary added 6.4 MiB gzipped; 2026-12-07: 50.2 MiB with it, until nvcc's
 * `--compress-mode=size` shrank that library from 14.7 to 4.3 MB), so that a bundle that can travel
 * is never refused on the day a GPU is lent.
 */
export const HARD_LIMIT_BYTES = 60 * 2 ** 20;

/** Single-process checks, bundled into js/<name>.js (with the workers the library may start). */
export const CHECK_ENTRIES = {
  gpu_env: "scripts/gpu_check/env.ts",
  ops_vs_cpu: "scripts/gpu_check/ops_vs_cpu.ts",
  parity: "scripts/gpu_check/parity_entry.ts",
  bench_gpt: "scripts/gpu_check/bench_gpt.ts",
  bench_attention: "scripts/gpu_check/bench_attention.ts",
  resume_check: "scripts/gpu_check/resume_check.ts",
  sync_store_worker: "distributed/control/sync_store_worker.ts",
  nccl_watchdog_worker: "distributed/backends/nccl_watchdog_worker.ts",
  checkpoint_commit_worker: "train/checkpoint/commit_worker.ts",
} as const;

/**
 * Scripts the launcher runs as ranks from inside a bundled check (js/<name>.js): bundled alone,
 * "dtrain" left as an import (the single file's library, which the rank bootstrap set up).
 */
export const RANK_SCRIPTS = { syncbn_rank: "parity/syncbn_rank.ts" } as const;

/**
 * Folders a rank script may bundle in: parsing and reporting only. Any other library folder
 * would be a second copy of the library inside the script, without the rank's store.
 */
const RANK_SCRIPT_FOLDERS = ["parity/", "io/"];

/** Launched checks, copied as they are into scripts/ (they import only "dtrain"). */
export const LAUNCHED_SCRIPTS = [
  "scripts/gpu_check/nccl_ranks.ts",
  "scripts/gpu_check/train_job.ts",
];

function copyTree(from: string, to: string): number {
  Deno.mkdirSync(to, { recursive: true });
  let files = 0;
  for (const e of Deno.readDirSync(from)) {
    if (e.isDirectory) files += copyTree(join(from, e.name), join(to, e.name));
    else if (e.isFile) {
      Deno.copyFileSync(join(from, e.name), join(to, e.name));
      files++;
    }
  }
  return files;
}

/**
 * Packs `staging`/fixtures as one xz-compressed tar: the fixtures are mostly JSON and float
 * arrays, which xz packs into 3.9 MB where gzip -9 needs 6.4 (the difference keeps the bundle
 * under its 50 MiB). The GPU machine unpacks it with `tar -xJf`, or Python's own lzma where
 * it has no xz (run.sh).
 */
async function packFixtures(staging: string, file: string): Promise<void> {
  const tar = new Deno.Command("tar", {
    args: ["-cf", "-", "-C", staging, "fixtures"],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let xz: Deno.ChildProcess;
  try {
    xz = new Deno.Command("xz", {
      args: ["-9e", "-T1", "-c"],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (e) {
    tar.kill();
    await tar.status;
    throw new Error(
      `the fixtures are packed with xz, which is not installed here (${(e as Error).message}): ` +
        "apt-get install xz-utils",
    );
  }
  const [, packed, tarErr, tarDone, xzDone] = await Promise.all([
    tar.stdout.pipeTo(xz.stdin),
    new Response(xz.stdout).arrayBuffer(),
    new Response(tar.stderr).text(),
    tar.status,
    xz.status,
  ]);
  if (!tarDone.success) throw new Error(`tar could not pack the fixtures: ${tarErr}`);
  if (!xzDone.success) throw new Error(`xz could not compress the fixtures (exit ${xzDone.code})`);
  Deno.writeFileSync(file, new Uint8Array(packed));
}

/** Bytes of every file under `dir`. */
export function treeBytes(dir: string): number {
  let n = 0;
  for (const e of Deno.readDirSync(dir)) {
    const p = join(dir, e.name);
    n += e.isDirectory ? treeBytes(p) : Deno.statSync(p).size;
  }
  return n;
}

/** What was written. */
export interface GpuBundle {
  dir: string;
  bytes: number;
  /** native libraries inside the single file */
  libraries: string[];
  fixtures: number;
}

/**
 * Writes the bundle into `out` (replacing it). Refuses when the CUDA library
 * could not be built here (no nvcc), unless `allowNoCuda` (a bundle that can
 * only check the emulated device, for tests), and when it exceeds 60 MiB
 * (over 50 MiB it warns).
 *
 * @example
 * ```ts
 * const b = await buildGpuBundle({ out: "dist/gpu-check" });
 * console.log(`${b.dir}: ${(b.bytes / 2 ** 20).toFixed(1)} MiB`);
 * ```
 */
export async function buildGpuBundle(opts: {
  out: string;
  fixtures?: string;
  allowNoCuda?: boolean;
  quiet?: boolean;
}): Promise<GpuBundle> {
  const out = resolve(opts.out);
  const say = (line: string) => opts.quiet || console.error(`gpu-bundle: ${line}`);
  try {
    Deno.removeSync(out, { recursive: true });
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  Deno.mkdirSync(out, { recursive: true });
  const single = await buildSingle({
    request: "sfx",
    out: join(out, "dtrain"),
    offline: true,
    gzipLevel: 9,
    quiet: opts.quiet ?? false,
  });
  if (!single.libraries.includes("libdtrain_cuda.so") && !opts.allowNoCuda) {
    throw new Error(
      "the CUDA library was not built (nvcc is not on PATH, or DTRAIN_CUDA=0): the bundle could " +
        "not check a GPU. Install the CUDA toolkit's nvcc, or pass --allow-no-cuda for a bundle " +
        "that checks only the emulated device",
    );
  }
  say(`dtrain: ${(single.bytes / 2 ** 20).toFixed(1)} MiB with ${single.libraries.join(", ")}`);
  try {
    await bundleScripts(ROOT, CHECK_ENTRIES, join(out, "js"));
  } finally {
    await stopBundler();
  }
  for (const [name, src] of Object.entries(RANK_SCRIPTS)) {
    const inputs = await bundleRankScript(ROOT, src, join(out, "js", `${name}.js`));
    const stray = inputs.filter((f) => !RANK_SCRIPT_FOLDERS.some((d) => f.startsWith(d)));
    if (stray.length) {
      throw new Error(
        `${src} bundles library modules (${stray.join(", ")}): a rank script takes the ` +
          `library from "dtrain" only, or it runs a copy of its own without the rank's store`,
      );
    }
  }
  Deno.mkdirSync(join(out, "scripts"));
  for (const s of LAUNCHED_SCRIPTS) {
    Deno.copyFileSync(join(ROOT, s), join(out, "scripts", basename(s)));
  }
  Deno.copyFileSync(
    join(ROOT, "scripts/gpu_check/bench_gpt_torch.py"),
    join(out, "bench_gpt_torch.py"),
  );
  Deno.copyFileSync(
    join(ROOT, "scripts/gpu_check/bench_attention_torch.py"),
    join(out, "bench_attention_torch.py"),
  );
  Deno.copyFileSync(join(ROOT, "scripts/gpu_check/run.sh"), join(out, "run.sh"));
  Deno.chmodSync(join(out, "run.sh"), 0o755);
  copyTree(join(ROOT, "scripts/gpu_check/steps"), join(out, "steps"));
  const staging = Deno.makeTempDirSync({ prefix: "dtrain-gpu-bundle-" });
  let fixtures: number;
  try {
    fixtures = copyTree(opts.fixtures ?? defaultFixtureDir(), join(staging, "fixtures", "pytorch"));
    try {
      // the repository's own references, less those no device step reads: pytorch/ came from the
      // chosen set above, and torch_api/ checks the optimizers and losses on the CPU only
      for (const e of Deno.readDirSync(join(ROOT, "fixtures"))) {
        if (e.name === "pytorch" || e.name === "torch_api") continue;
        const from = join(ROOT, "fixtures", e.name), to = join(staging, "fixtures", e.name);
        if (e.isDirectory) fixtures += copyTree(from, to);
        else if (e.isFile) {
          Deno.copyFileSync(from, to);
          fixtures++;
        }
      }
    } catch { /* the repository has no fixtures of its own */ }
    await packFixtures(staging, join(out, "fixtures.tar.xz"));
  } finally {
    Deno.removeSync(staging, { recursive: true });
  }
  const bytes = treeBytes(out);
  const mib = (n: number) => (n / 2 ** 20).toFixed(1);
  if (bytes > HARD_LIMIT_BYTES) {
    throw new Error(
      `${out} is ${mib(bytes)} MiB, more than the ${
        mib(HARD_LIMIT_BYTES)
      } MiB that may travel to the GPU machine (64 MiB, with room)`,
    );
  }
  if (bytes > MAX_BUNDLE_BYTES) {
    console.error(
      `gpu-bundle: warning: ${mib(bytes)} MiB is over the ${
        mib(MAX_BUNDLE_BYTES)
      } MiB the bundle is held to (it still travels: at most ${mib(HARD_LIMIT_BYTES)} MiB)`,
    );
  }
  say(
    `${out}: ${
      (bytes / 2 ** 20).toFixed(1)
    } MiB, ${fixtures} fixture files; run it with \`sh run.sh\``,
  );
  return { dir: out, bytes, libraries: single.libraries, fixtures };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      out: { type: "string", default: join(ROOT, "dist", "gpu-check") },
      fixtures: { type: "string" },
      "allow-no-cuda": { type: "boolean", default: false },
      quiet: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(
      "Usage: deno task gpu-bundle [--out DIR] [--fixtures DIR] [--allow-no-cuda] [--quiet]\n\n" +
        "Writes dist/gpu-check/ (held to 50 MiB, refused past 60): copy it to a GPU machine and run `sh run.sh` there\n" +
        "(`sh run.sh --help` there says what the folder holds and what each step checks).",
    );
    Deno.exit(0);
  }
  try {
    await buildGpuBundle({
      out: values.out,
      ...(values.fixtures ? { fixtures: values.fixtures } : {}),
      allowNoCuda: values["allow-no-cuda"],
      quiet: values.quiet,
    });
  } catch (e) {
    console.error(`gpu-bundle: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
