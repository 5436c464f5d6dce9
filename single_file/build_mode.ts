/**
 * Which single file scripts/build_single.ts makes: a `deno compile` binary
 * when a Deno runtime (denort) is at hand — DENORT_BIN, the runtime archive
 * already in DENO_DIR, or a reachable download — else the self-extracting
 * file, which needs nothing but the deno that runs the build.
 */
import { join } from "node:path";

/** The runtime archive `deno compile` looks for (Linux x86-64 only, like dtrain's kernels). */
export const DENORT_ARCHIVE = "denort-x86_64-unknown-linux-gnu.zip";

/** Where `deno compile` downloads the runtime of `version` from. */
export function denortUrl(version: string): string {
  return `https://dl.deno.land/release/v${version}/${DENORT_ARCHIVE}`;
}

/** Where `deno compile` keeps a downloaded runtime of `version` inside DENO_DIR. */
export function denortCachePath(denoDir: string, version: string): string {
  return join(denoDir, "dl", "release", `v${version}`, DENORT_ARCHIVE);
}

/** The decision, with the reason printed by the build. */
export type BuildMode =
  | { kind: "compile"; runtime: string; why: string }
  | { kind: "sfx"; why: string };

/** What the decision looks at; tests pass their own. */
export interface BuildModeInput {
  /** --sfx, --compile, or neither */
  request: "auto" | "sfx" | "compile";
  env: (name: string) => string | undefined;
  /** the DENO_DIR the building deno uses (`deno info --json`) */
  denoDir: string;
  denoVersion: string;
  exists: (path: string) => boolean;
  /** asks whether the runtime can be downloaded; null with --offline (not asked) */
  canDownload: (() => Promise<boolean>) | null;
}

/**
 * Decides how to build. A DENORT_BIN that does not exist is an error (it was
 * asked for); `--compile` with no runtime anywhere is an error too.
 *
 * @example
 * ```ts
 * const mode = await chooseBuildMode({ request: "auto", env: (n) => Deno.env.get(n),
 *   denoDir, denoVersion: Deno.version.deno, exists, canDownload: null });
 * // { kind: "sfx", why: "no Deno runtime for deno compile: DENORT_BIN is not set, ..." }
 * ```
 */
export async function chooseBuildMode(input: BuildModeInput): Promise<BuildMode> {
  if (input.request === "sfx") return { kind: "sfx", why: "--sfx was given" };
  const bin = input.env("DENORT_BIN");
  if (bin) {
    if (!input.exists(bin)) {
      throw new Error(
        `DENORT_BIN=${bin} does not exist: point it at a denort binary of Deno ${input.denoVersion}, or unset it`,
      );
    }
    return { kind: "compile", runtime: bin, why: `DENORT_BIN=${bin}` };
  }
  const cached = denortCachePath(input.denoDir, input.denoVersion);
  if (input.exists(cached)) {
    return {
      kind: "compile",
      runtime: cached,
      why: `the runtime archive is in DENO_DIR (${cached})`,
    };
  }
  const url = denortUrl(input.denoVersion);
  if (input.canDownload && await input.canDownload()) {
    return { kind: "compile", runtime: url, why: `the runtime can be downloaded from ${url}` };
  }
  const misses = `DENORT_BIN is not set, ${cached} does not exist, and ${
    input.canDownload ? `${url} cannot be reached` : "downloads are off (--offline)"
  }`;
  if (input.request === "compile") {
    throw new Error(
      `Cannot build with deno compile (--compile): ${misses}. Put the runtime archive at ${cached}, ` +
        `or set DENORT_BIN, or build the self-extracting file (--sfx)`,
    );
  }
  return { kind: "sfx", why: `no Deno runtime for deno compile: ${misses}` };
}

/**
 * Whether the runtime archive can be fetched now (a HEAD request with a short
 * timeout; any failure counts as "no").
 */
export async function downloadReachable(url: string, timeoutMs = 3000): Promise<boolean> {
  try {
    const r = await fetch(url, { method: "HEAD", signal: AbortSignal.timeout(timeoutMs) });
    await r.body?.cancel();
    return r.ok;
  } catch {
    return false;
  }
}
