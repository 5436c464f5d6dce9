/**
 * What the single file carries so that Gloo runs on a machine without
 * Debian's libgloo0: every shared library libdtrain_gloo.so needs (libgloo
 * and, through it, libhiredis, libibverbs, libnl), as the dynamic linker
 * resolves them here, except glibc's own, libgcc_s (which Deno itself loads)
 * and libstdc++. They go beside libdtrain_gloo.so, whose RPATH is $ORIGIN,
 * with each package's copyright file in lib/licenses/.
 *
 * Why not libstdc++: every distribution installs one, and Debian 12's needs
 * glibc 2.36 while libgloo needs only 2.34; the target's own libstdc++ (from
 * GCC 12 or newer, as libgloo needs) keeps Ubuntu 22.04 (glibc 2.35) usable.
 */
import { basename, join } from "node:path";

/** Libraries every glibc machine has, or that the Deno runtime loads before dtrain: never carried. */
const SYSTEM =
  /^(linux-vdso|ld-linux[^ ]*|lib(c|m|dl|rt|pthread|util|resolv)\.so\.\d+|libgcc_s\.so\.1|libstdc\+\+\.so\.6)$/;

/** One library to carry: its file name (the SONAME) and where it is here. */
export interface CarriedLibrary {
  name: string;
  path: string;
}

/** Parses `ldd` output into the libraries to carry (those resolved, minus the system's). */
export function parseLdd(text: string): CarriedLibrary[] {
  const out: CarriedLibrary[] = [];
  for (const line of text.split("\n")) {
    const m = /^\s*(\S+) => (\/\S+) \(0x[0-9a-f]+\)/.exec(line);
    if (!m) {
      const missing = /^\s*(\S+) => not found/.exec(line);
      if (missing) {
        throw new Error(`Cannot carry Gloo's libraries: ${missing[1]} is not found here`);
      }
      continue;
    }
    if (!SYSTEM.test(m[1]!)) out.push({ name: m[1]!, path: m[2]! });
  }
  return out;
}

/** The libraries libdtrain_gloo.so at `lib` needs that the single file must carry. */
export function glooRuntimeLibraries(lib: string): CarriedLibrary[] {
  const r = new Deno.Command("ldd", { args: [lib], stdout: "piped", stderr: "piped" }).outputSync();
  if (!r.success) {
    throw new Error(`ldd ${lib} failed: ${new TextDecoder().decode(r.stderr).trim()}`);
  }
  return parseLdd(new TextDecoder().decode(r.stdout));
}

/** The Debian package that installed `path` and its copyright file, when dpkg knows it. */
function copyrightOf(path: string): { pkg: string; file: string } | null {
  for (const p of [path, Deno.realPathSync(path)]) {
    try {
      const r = new Deno.Command("dpkg", { args: ["-S", p], stdout: "piped", stderr: "null" })
        .outputSync();
      if (!r.success) continue;
      const pkg = new TextDecoder().decode(r.stdout).split(":")[0]!.trim();
      const file = `/usr/share/doc/${pkg}/copyright`;
      Deno.statSync(file);
      return { pkg, file };
    } catch { /* no dpkg, or no copyright file: try the resolved path */ }
  }
  return null;
}

/**
 * Copies the libraries libdtrain_gloo.so (in `libDir` already) needs into
 * `libDir`, and their packages' copyright files into `libDir`/licenses.
 * Returns the file names copied.
 */
export function stageGlooRuntime(libDir: string): string[] {
  const gloo = join(libDir, "libdtrain_gloo.so");
  try {
    Deno.statSync(gloo);
  } catch {
    return []; // not built here (no libgloo-dev): the single file runs one machine's CPU ranks only
  }
  const carried = glooRuntimeLibraries(gloo);
  Deno.mkdirSync(join(libDir, "licenses"), { recursive: true });
  for (const lib of carried) {
    Deno.copyFileSync(Deno.realPathSync(lib.path), join(libDir, lib.name));
    Deno.chmodSync(join(libDir, lib.name), 0o755);
    const c = copyrightOf(lib.path);
    if (c) Deno.copyFileSync(c.file, join(libDir, "licenses", `${c.pkg}.copyright`));
  }
  return carried.map((l) => basename(l.name));
}
