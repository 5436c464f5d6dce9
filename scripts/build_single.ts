/**
 * `deno task build`: dist/dtrain, one file holding the Deno runtime, dtrain
 * bundled with esbuild and the native libraries. It is a `deno compile`
 * binary when a Deno runtime (denort) is available, else a self-extracting
 * file (single_file/header.sh + a gzip'd tar); single_file/README.md describes both.
 *
 *   deno run -A scripts/build_single.ts [--sfx | --compile] [--offline] [--out FILE]
 *     [--stage DIR] [--gzip-level 1-9] [--quiet]
 */
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pkg from "../package.json" with { type: "json" };
import { BUILD_DIR, buildNative, LIBRARIES } from "./build_native.ts";
import { stageGlooRuntime } from "./gloo_runtime_libs.ts";
import { bundleCompiledMain, bundleDtrain, stopBundler } from "../single_file/bundle.ts";
import { chooseBuildMode, denortUrl, downloadReachable } from "../single_file/build_mode.ts";
import { sha256File } from "../os/single_file_manifest.ts";
import {
  fillHeader,
  packPayload,
  writeManifest,
  writeSelfExtracting,
} from "../single_file/pack.ts";
import type { PayloadInfo } from "../single_file/unpack.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** What the build made. */
export interface BuildResult {
  kind: "sfx" | "compile";
  path: string;
  bytes: number;
  sha256: string;
  why: string;
  /** the payload's cache folder name */
  payloadId: string;
  /** native libraries packed */
  libraries: string[];
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** The DENO_DIR of the deno running this build, as `deno info` reports it. */
function denoDir(): string {
  const r = new Deno.Command(Deno.execPath(), { args: ["info", "--json"], stderr: "null" })
    .outputSync();
  const dir = r.success ? JSON.parse(new TextDecoder().decode(r.stdout)).denoDir : undefined;
  if (typeof dir !== "string") throw new Error("Cannot find DENO_DIR: `deno info --json` failed");
  return dir;
}

/**
 * Drops a shipped library's local symbols and debug sections (`strip --strip-unneeded`: the
 * exported dt_* symbols stay), which the single file and the 50 MiB device bundle do not carry.
 * Where binutils' strip is missing the library ships as built.
 */
function stripSymbols(file: string): void {
  try {
    const r = new Deno.Command("strip", { args: ["--strip-unneeded", file], stderr: "piped" })
      .outputSync();
    if (!r.success) {
      throw new Error(`strip ${file} failed: ${new TextDecoder().decode(r.stderr).trim()}`);
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
}

/** Builds the native libraries and copies every available one into `libDir`. */
function stageLibraries(libDir: string, quiet: boolean): Record<string, string> {
  buildNative({ quiet });
  Deno.mkdirSync(libDir, { recursive: true });
  const hashes: Record<string, string> = {};
  for (const spec of LIBRARIES.filter((s) => s.available() && !s.onDemand)) {
    const src = join(BUILD_DIR, spec.name);
    Deno.copyFileSync(src, join(libDir, spec.name));
    Deno.chmodSync(join(libDir, spec.name), 0o755);
    stripSymbols(join(libDir, spec.name));
    Deno.copyFileSync(`${src}.hash`, join(libDir, `${spec.name}.hash`)); // for `dtrain doctor`
    hashes[spec.name] = Deno.readTextFileSync(`${src}.hash`).trim();
  }
  if (!hashes["libdtrain_cpu.so"]) throw new Error("Cannot build: libdtrain_cpu.so was not built");
  stageGlooRuntime(libDir); // libgloo and what it needs, beside libdtrain_gloo.so
  return hashes;
}

/** Lays out the tree the single file unpacks to: bin/, js/, lib/, deno.json, manifest.json. */
async function stageTree(tree: string, quiet: boolean): Promise<Record<string, string>> {
  Deno.mkdirSync(join(tree, "bin"), { recursive: true });
  Deno.copyFileSync(Deno.execPath(), join(tree, "bin", "deno"));
  Deno.chmodSync(join(tree, "bin", "deno"), 0o755);
  const libraries = stageLibraries(join(tree, "lib"), quiet);
  await bundleDtrain(ROOT, join(tree, "js"));
  // The config every process of the unpacked dtrain runs with: "dtrain" is the bundled library.
  Deno.writeTextFileSync(
    join(tree, "deno.json"),
    JSON.stringify({ imports: { dtrain: "./js/mod.js" }, lock: false }, null, 2) + "\n",
  );
  writeManifest(tree, {
    dtrainVersion: pkg.version,
    denoVersion: Deno.version.deno,
    libraries,
  });
  return libraries;
}

async function runDenoCompile(compiled: string, out: string): Promise<void> {
  const r = await new Deno.Command(Deno.execPath(), {
    args: [
      "compile",
      "-A",
      "--no-config",
      "--no-check",
      "--include",
      join(compiled, "payload.tar.gz"),
      "--include",
      join(compiled, "payload.json"),
      "--output",
      out,
      join(compiled, "main.js"),
    ],
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  if (!r.success) throw new Error(`deno compile exited with code ${r.code}`);
}

/**
 * Builds the single file.
 *
 * @example
 * ```ts
 * const r = await buildSingle({ request: "auto", out: "dist/dtrain", offline: false });
 * console.log(r.kind, r.bytes, r.sha256);
 * ```
 */
export async function buildSingle(opts: {
  request: "auto" | "sfx" | "compile";
  out: string;
  offline: boolean;
  /** keep the staged tree and compile inputs here (default: a temporary folder, removed) */
  stage?: string;
  /** gzip level of the payload (default 6) */
  gzipLevel?: number;
  quiet?: boolean;
}): Promise<BuildResult> {
  const quiet = opts.quiet ?? false;
  const say = (line: string) => quiet || console.error(`build: ${line}`);
  const stage = opts.stage ?? Deno.makeTempDirSync({ prefix: "dtrain-build-" });
  try {
    const mode = await chooseBuildMode({
      request: opts.request,
      env: (n) => Deno.env.get(n),
      denoDir: denoDir(),
      denoVersion: Deno.version.deno,
      exists,
      canDownload: opts.offline ? null : () => downloadReachable(denortUrl(Deno.version.deno)),
    });
    say(`${mode.kind === "sfx" ? "self-extracting file" : "deno compile"} (${mode.why})`);
    const tree = join(stage, "root");
    const compiled = join(stage, "compiled");
    Deno.mkdirSync(compiled, { recursive: true });
    const libraries = await stageTree(tree, quiet);
    say(`staged deno ${Deno.version.deno}, the bundle and ${Object.keys(libraries).join(", ")}`);
    const payload = await packPayload(tree, join(compiled, "payload.tar.gz"), opts.gzipLevel);
    const info: PayloadInfo = {
      id: `${pkg.version}-${payload.sha256.slice(0, 16)}`,
      unpackedBytes: payload.unpackedBytes,
    };
    Deno.writeTextFileSync(join(compiled, "payload.json"), JSON.stringify(info) + "\n");
    await bundleCompiledMain(ROOT, join(compiled, "main.js"));
    say(`payload ${(payload.bytes / 1e6).toFixed(1)} MB (${info.id})`);

    const out = resolve(opts.out);
    Deno.mkdirSync(resolve(out, ".."), { recursive: true });
    let written: { bytes: number; sha256: string };
    if (mode.kind === "sfx") {
      const header = fillHeader(Deno.readTextFileSync(join(ROOT, "single_file", "header.sh")), {
        version: pkg.version,
        payloadId: info.id,
        unpackedMb: Math.ceil(payload.unpackedBytes / 2 ** 20),
      });
      written = await writeSelfExtracting(header, payload.path, out);
    } else {
      await runDenoCompile(compiled, out);
      written = { bytes: Deno.statSync(out).size, sha256: sha256File(out) };
    }
    return {
      kind: mode.kind,
      path: out,
      ...written,
      why: mode.why,
      payloadId: info.id,
      libraries: Object.keys(libraries),
    };
  } finally {
    await stopBundler();
    if (!opts.stage) Deno.removeSync(stage, { recursive: true });
  }
}

const HELP = `Usage: deno task build [--sfx | --compile] [--offline] [--out FILE] [--stage DIR]
                        [--gzip-level 1-9] [--quiet]

Builds dist/dtrain: one file with the Deno runtime, dtrain and its native libraries.
  (neither)       deno compile when a runtime (denort) is available: DENORT_BIN, the
                  archive in DENO_DIR, or a reachable download; else self-extracting
  --sfx           the self-extracting file (POSIX sh header + gzip'd tar)
  --compile       deno compile, or fail saying why not
  --offline       do not probe the download (also DTRAIN_BUILD_OFFLINE=1)
  --out FILE      where to write it (default: dist/dtrain)
  --stage DIR     keep the staged tree and the deno compile inputs in DIR
  --gzip-level N  payload compression (default 6; 1 is faster and ~15% larger)
DTRAIN_CUDA=0 leaves the CUDA library out even where nvcc is installed.`;

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      sfx: { type: "boolean", default: false },
      compile: { type: "boolean", default: false },
      offline: { type: "boolean", default: false },
      out: { type: "string", default: join(ROOT, "dist", "dtrain") },
      stage: { type: "string" },
      "gzip-level": { type: "string", default: "6" },
      quiet: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    Deno.exit(0);
  }
  if (values.sfx && values.compile) {
    console.error("build: --sfx and --compile exclude each other");
    Deno.exit(2);
  }
  try {
    const r = await buildSingle({
      request: values.sfx ? "sfx" : values.compile ? "compile" : "auto",
      out: values.out,
      offline: values.offline || Deno.env.get("DTRAIN_BUILD_OFFLINE") === "1",
      quiet: values.quiet,
      gzipLevel: Number(values["gzip-level"]),
      ...(values.stage ? { stage: resolve(values.stage) } : {}),
    });
    const kind = r.kind === "sfx" ? "self-extracting file" : "deno compile binary";
    console.log(
      `built ${r.path}: ${kind}, ${(r.bytes / 1e6).toFixed(1)} MB, sha256 ${r.sha256}`,
    );
  } catch (e) {
    console.error(`build: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
