/**
 * The `dtrain` wrapper's native build check: the build script runs only when the libraries are
 * missing, a kernel source or the build script is newer than the stamp of the last passing
 * check for the same job facts (--device, --nnodes, a GPU present), or what decides the builds
 * (DTRAIN_CUDA, the nvcc on PATH, …) changed; otherwise the wrapper goes straight to cli.ts. Run against a copy of the wrapper whose deno is a stand-in
 * that records how it was called.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO } from "./launch_helpers.ts";

/** A checkout-shaped folder: the real wrapper, a recording deno, kernels/, build/. */
function fakeCheckout(): string {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-wrapper-" });
  Deno.copyFileSync(join(REPO, "dtrain"), join(root, "dtrain"));
  Deno.chmodSync(join(root, "dtrain"), 0o755);
  for (const d of ["node_modules/.bin", "kernels/cpu", "scripts", "build", "bin"]) {
    Deno.mkdirSync(join(root, d), { recursive: true });
  }
  // The stand-in deno appends the script it was asked to run to calls.txt.
  const deno = join(root, "node_modules/.bin/deno");
  Deno.writeTextFileSync(
    deno,
    `#!/bin/sh\nfor a in "$@"; do case $a in *.ts) echo "\${a##*/}" >>"${root}/calls.txt";; esac; done\n`,
  );
  Deno.chmodSync(deno, 0o755);
  Deno.writeTextFileSync(join(root, "kernels/cpu/a.c"), "int a;\n");
  Deno.writeTextFileSync(join(root, "scripts/build_native.ts"), "");
  for (const lib of ["libdtrain_cpu.so", "libdtrain_shm.so"]) {
    Deno.writeTextFileSync(join(root, "build", lib), "");
  }
  return root;
}

/** Runs the wrapper with PATH = bin/ of the fake checkout plus the system's; returns the scripts deno ran. */
function runWrapper(
  root: string,
  env: Record<string, string> = {},
  args: string[] = ["--version"],
): string[] {
  try {
    Deno.removeSync(join(root, "calls.txt"));
  } catch { /* first run */ }
  const out = new Deno.Command("/bin/sh", {
    args: [join(root, "dtrain"), ...args],
    env: { PATH: `${join(root, "bin")}:/usr/bin:/bin`, DTRAIN_CUDA: "", ...env },
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return Deno.readTextFileSync(join(root, "calls.txt")).trim().split("\n");
}

/** Sets the mtime of a file a few seconds into the past (so a later write is "newer"). */
function age(path: string): void {
  const past = new Date(Date.now() - 10_000);
  Deno.utimeSync(path, past, past);
}

Deno.test("the wrapper builds only when a source, the libraries or the CUDA choice changed", () => {
  const root = fakeCheckout();
  try {
    const stamp = join(root, "build/.native-checked.auto.1.0");
    const key = (nvcc: string, cuda = "") =>
      `cuda=${cuda} emu= gloo= backend= nvcc=${nvcc} race= mem=`;
    // No stamp: a build, then the command; the stamp records the choice (no nvcc on PATH).
    assert.deepEqual(runWrapper(root), ["build_native.ts", "cli.ts"]);
    assert.equal(Deno.readTextFileSync(stamp), key(""));
    for (const f of ["kernels/cpu/a.c", "scripts/build_native.ts"]) age(join(root, f));
    // Nothing changed: straight to cli.ts.
    assert.deepEqual(runWrapper(root), ["cli.ts"]);
    // A kernel source edited after the stamp.
    Deno.writeTextFileSync(join(root, "kernels/cpu/a.c"), "int b;\n");
    assert.deepEqual(runWrapper(root), ["build_native.ts", "cli.ts"]);
    age(join(root, "kernels/cpu/a.c"));
    assert.deepEqual(runWrapper(root), ["cli.ts"]);
    // An nvcc appears on PATH: the CUDA library may now be built.
    const nvcc = join(root, "bin/nvcc");
    Deno.writeTextFileSync(nvcc, "#!/bin/sh\n");
    Deno.chmodSync(nvcc, 0o755);
    assert.deepEqual(runWrapper(root), ["build_native.ts", "cli.ts"]);
    assert.equal(Deno.readTextFileSync(stamp), key(nvcc));
    assert.deepEqual(runWrapper(root), ["cli.ts"]);
    // Another device is another job: its own check once, then straight to cli.ts; the build
    // script is given the whole command line (build_native.ts, then the script's name).
    const emu = ["--nproc", "2", "--device", "cuda-emu", "train.ts", "--device", "cpu"];
    assert.deepEqual(runWrapper(root, {}, emu), [
      "build_native.ts",
      "train.ts",
      "cli.ts",
      "train.ts",
    ]);
    assert.ok(Deno.statSync(join(root, "build/.native-checked.cuda-emu.1.0")).isFile);
    assert.deepEqual(runWrapper(root, {}, emu), ["cli.ts", "train.ts"]);
    assert.deepEqual(runWrapper(root, {}, ["--nnodes=2", "t.ts"]), [
      "build_native.ts",
      "t.ts",
      "cli.ts",
      "t.ts",
    ]);
    assert.ok(Deno.statSync(join(root, "build/.native-checked.auto.2.0")).isFile);
    // DTRAIN_CUDA changes the choice too; a missing library forces a build.
    assert.deepEqual(runWrapper(root, { DTRAIN_CUDA: "0" }), ["build_native.ts", "cli.ts"]);
    Deno.removeSync(join(root, "build/libdtrain_shm.so"));
    assert.deepEqual(runWrapper(root, { DTRAIN_CUDA: "0" }), ["build_native.ts", "cli.ts"]);
    // DTRAIN_NO_BUILD=1 skips the check.
    assert.deepEqual(runWrapper(root, { DTRAIN_NO_BUILD: "1" }), ["cli.ts"]);
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});
