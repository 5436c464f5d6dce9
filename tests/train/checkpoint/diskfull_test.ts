/**
 * A real full disk: a 256 KiB tmpfs mounted in a private mount namespace
 * (`unshare -m`, so nothing outside the child process sees it, and it goes
 * away with the process). Skipped where mounting is not allowed (not root,
 * or a container without CAP_SYS_ADMIN); checkpoint_faults_test.ts covers
 * the same paths with a simulated full disk everywhere.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const CHILD = fileURLToPath(new URL("../scripts/checkpoint_diskfull_child.ts", import.meta.url));
/** Mounts a tmpfs of `size` on $1 in a new mount namespace, then runs the rest of the arguments. */
const MOUNT_AND_RUN =
  'dir="$1"; size="$2"; shift 2; mount -t tmpfs -o "size=$size" dtrain-test "$dir" && exec "$@"';

function inTmpfs(dir: string, size: string, command: string[]): Deno.CommandOutput {
  const args = ["-m", "sh", "-c", MOUNT_AND_RUN, "sh", dir, size, ...command];
  return new Deno.Command("unshare", { args, stdout: "piped", stderr: "piped" }).outputSync();
}

function canMountTmpfs(): boolean {
  const dir = Deno.makeTempDirSync();
  try {
    return inTmpfs(dir, "64k", ["true"]).success;
  } catch {
    return false; // no unshare
  } finally {
    Deno.removeSync(dir);
  }
}

for (const mode of ["sync", "async"] as const) {
  Deno.test({
    name:
      `CheckpointManager.save() (${mode}) on a really full disk fails clearly, cleans up, and the next save fits`,
    ignore: Deno.build.os !== "linux" || !canMountTmpfs(),
    fn() {
      const dir = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-full-" });
      try {
        const run = inTmpfs(dir, "256k", [Deno.execPath(), "run", "-A", CHILD, dir, mode]);
        const stderr = new TextDecoder().decode(run.stderr);
        assert.ok(run.success, `the child failed: ${stderr}`);
        const got = JSON.parse(new TextDecoder().decode(run.stdout));
        assert.ok(got.error !== null, "the oversized save did not fail");
        assert.equal(got.error.code, "ENOSPC");
        assert.match(
          got.error.message,
          /^Cannot save checkpoint step-00000002 in .*: writing (model|optimizer)\.safetensors failed: No space left on device \(os error 28\)\. The previous checkpoint step-00000001 is intact and latest still names it/,
        );
        if (mode === "async") assert.match(got.error.message, /written in the background/);
        assert.deepEqual(
          got.afterFailure,
          ["latest", "step-00000001"],
          "the failed save left files on the full disk",
        );
        assert.deepEqual(got.warnings, []);
        assert.deepEqual(
          [...Deno.readDirSync(dir)],
          [],
          "the tmpfs must not be visible outside the child",
        );
      } finally {
        Deno.removeSync(dir, { recursive: true });
      }
    },
  });
}
