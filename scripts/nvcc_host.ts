/**
 * nvcc and its host compiler, for scripts/build_native.ts: the toolchain's
 * versions (part of the CUDA library's build hash, so a new nvcc or gcc
 * rebuilds it), and the host compiler nvcc accepts. nvcc refuses a gcc newer
 * than its release supports ("unsupported GNU version"); then an older g++-N
 * on PATH is passed with -ccbin, or the build stops saying what to install.
 * CUDAHOSTCXX (or nvcc's own NVCC_CCBIN) chooses the host compiler outright.
 */

const versions = new Map<string, string>();

/** `cmd --version`'s first lines (asked once per process), or "" when it does not run. */
export function toolVersion(cmd: string): string {
  let v = versions.get(cmd);
  if (v === undefined) {
    try {
      const r = new Deno.Command(cmd, { args: ["--version"], stdout: "piped", stderr: "null" })
        .outputSync();
      v = r.success ? new TextDecoder().decode(r.stdout).trim() : "";
    } catch {
      v = "";
    }
    versions.set(cmd, v);
  }
  return v;
}

/** What nvcc said when asked to use a host compiler (null: its default). */
export interface HostProbe {
  ok: boolean;
  stderr: string;
}

/** Host compilers tried after the default, newest first. */
export const OLDER_GCC = Array.from({ length: 12 }, (_, i) => `g++-${20 - i}`);

/**
 * The -ccbin arguments for nvcc: none when nvcc accepts the default host
 * compiler; `-ccbin <CUDAHOSTCXX>` when that is set; else the newest g++-N
 * that `probe` accepts. Throws a clear error when none is accepted.
 *
 * @example
 * ```ts
 * chooseHostCompiler((cc) => nvccProbe(cc), OLDER_GCC, (n) => Deno.env.get(n)); // [] or ["-ccbin", "g++-13"]
 * ```
 */
export function chooseHostCompiler(
  probe: (ccbin: string | null) => HostProbe,
  candidates: readonly string[],
  env: (name: string) => string | undefined,
): string[] {
  const chosen = env("CUDAHOSTCXX");
  if (chosen) return ["-ccbin", chosen];
  if (env("NVCC_CCBIN")) return []; // nvcc reads it itself
  const first = probe(null);
  if (first.ok) return [];
  if (!/unsupported (GNU|clang) version|host compiler/i.test(first.stderr)) {
    throw new Error(`nvcc cannot compile with its default host compiler: ${first.stderr.trim()}`);
  }
  for (const cc of candidates) {
    if (probe(cc).ok) return ["-ccbin", cc];
  }
  const said = first.stderr.match(/[^\n]*unsupported[^\n]*/i)?.[0]?.trim() ?? first.stderr.trim();
  throw new Error(
    `nvcc does not support this machine's host compiler (${said}), and no older g++ it accepts ` +
      `is on PATH (tried ${candidates.join(", ")}): install one (e.g. apt-get install g++-13) or ` +
      `set CUDAHOSTCXX to a supported host compiler`,
  );
}

/** nvcc preprocesses an empty CUDA file with host compiler `ccbin` (its host_config.h checks the version). */
export function nvccProbe(ccbin: string | null): HostProbe {
  try {
    const r = new Deno.Command("nvcc", {
      args: [...(ccbin ? ["-ccbin", ccbin] : []), "-x", "cu", "-E", "/dev/null", "-o", "/dev/null"],
      stdout: "null",
      stderr: "piped",
    }).outputSync();
    return { ok: r.success, stderr: new TextDecoder().decode(r.stderr) };
  } catch (e) {
    return { ok: false, stderr: (e as Error).message };
  }
}

let hostArgs: string[] | undefined;

/** The -ccbin arguments for this machine (decided once per process, when the CUDA library is built). */
export function nvccHostArgs(): string[] {
  hostArgs ??= chooseHostCompiler(nvccProbe, OLDER_GCC, (n) => Deno.env.get(n));
  return hostArgs;
}

/**
 * `--compress-mode=size` where nvcc has it (CUDA 12.8 and later): the fat
 * binary's SASS and PTX compressed for size rather than load speed, which
 * takes the CUDA library from 14.7 to about 5 MB (attention_tc.cu's object:
 * 2.76 MB -> 0.54 MB with nvcc 13) — what keeps the device bundle that
 * travels to a lent GPU machine under its budget. The driver decompresses it
 * once when the library loads. Older nvcc builds as before.
 */
export function nvccCompressArgs(versionText: string = toolVersion("nvcc")): string[] {
  const m = /release (\d+)\.(\d+)/.exec(versionText);
  if (!m) return [];
  const [major, minor] = [Number(m[1]), Number(m[2])];
  return major > 12 || (major === 12 && minor >= 8) ? ["--compress-mode=size"] : [];
}
