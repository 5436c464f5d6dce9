/**
 * Asynchronous checkpoint saves (CheckpointManager's `async`): the same bytes
 * as a synchronous save, a snapshot taken at save() time, at most one commit
 * in flight, hooks when durable, failures reported at the next call, and no
 * commit lost when the process ends. A real full disk and kill -9 with async
 * saves: diskfull_test.ts and kill_test.ts.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  addCheckpointSavedHook,
  type CheckpointIO,
  CheckpointManager,
  denoCheckpointIO,
  FOLDER_LOCK_FILE,
  waitForCheckpoints,
} from "../../../train/checkpoint/manager.ts";
import { assertHoldsPayload, payloadForStep } from "../scripts/checkpoint_payloads.ts";

const EXIT_CHILD = fileURLToPath(new URL("../scripts/checkpoint_async_exit.ts", import.meta.url));

async function withTempDir(fn: (dir: string) => Promise<void> | void): Promise<void> {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-async-" });
  try {
    await fn(dir);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

/** The folder's entries, without the lock file its writer holds (folder_lock.ts). */
const names = (dir: string) =>
  [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n !== FOLDER_LOCK_FILE).sort();

Deno.test("an async save writes the same files, byte for byte, as a sync save", async () => {
  await withTempDir(async (root) => {
    const sync = new CheckpointManager(join(root, "sync"), { rank: 0 });
    const async = new CheckpointManager(join(root, "async"), { rank: 0, async: true });
    sync.save(payloadForStep(5, { scale: 4 }));
    async.save(payloadForStep(5, { scale: 4 }));
    await async.wait();
    assert.deepEqual(names(join(root, "async")), names(join(root, "sync")));
    assert.equal(
      Deno.readTextFileSync(join(root, "async", "latest")),
      Deno.readTextFileSync(join(root, "sync", "latest")),
    );
    const a = join(root, "async", "step-00000005"), s = join(root, "sync", "step-00000005");
    assert.deepEqual(names(a), names(s));
    for (const name of names(s)) {
      const got = Deno.readFileSync(join(a, name)), want = Deno.readFileSync(join(s, name));
      if (name === "manifest.json") {
        // The save time differs; everything else (sizes, sha256s) must not.
        const strip = (b: Uint8Array) => ({
          ...JSON.parse(new TextDecoder().decode(b)),
          created: 0,
        });
        assert.deepEqual(strip(got), strip(want));
      } else {
        assert.deepEqual(got, want, name);
      }
    }
    async.close();
  });
});

Deno.test("an async save snapshots the payload: changing the tensors and state right after does not change the checkpoint", async () => {
  await withTempDir(async (root) => {
    const manager = new CheckpointManager(root, { rank: 0, async: true });
    const payload = payloadForStep(9, { scale: 32 });
    manager.save(payload);
    // What an optimizer step does right after: update the parameters in place.
    for (const f of payload.files) for (const t of f.tensors.values()) t.data.fill(0xa5);
    (payload.state as { step: number }).step = -1;
    await manager.wait();
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(9, { scale: 32 }));
    manager.close();
  });
});

Deno.test("async saves: the next save waits for the previous commit; wait() and close() leave nothing in flight", async () => {
  await withTempDir(async (root) => {
    const manager = new CheckpointManager(root, { rank: 0, async: true, keepLast: 2 });
    const dir1 = manager.save(payloadForStep(1));
    assert.equal(dir1, join(root, "step-00000001"));
    manager.save(payloadForStep(2));
    // save(2) returned, so step 1's commit was settled first (at most one in flight).
    assertHoldsPayload(manager.load("step-00000001"), payloadForStep(1));
    await manager.wait();
    assert.equal(Deno.readTextFileSync(join(root, "latest")), "step-00000002\n");
    manager.save(payloadForStep(3));
    manager.close();
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(3));
    assert.deepEqual(names(root), ["latest", "step-00000002", "step-00000003"], "rotation ran");
    // Usable after close(): a new save starts a new thread.
    manager.save(payloadForStep(4));
    await manager.wait();
    assertHoldsPayload(manager.loadLatest()!, payloadForStep(4));
    manager.close();
    await manager.wait(); // nothing in flight: resolves at once
  });
});

Deno.test("async saves: saved-hooks fire once the commit is durable, never at snapshot time", async () => {
  await withTempDir(async (root) => {
    const seen: { step: number; latest: string; complete: boolean }[] = [];
    const manager = new CheckpointManager(root, { rank: 0, async: true });
    const remove = addCheckpointSavedHook(({ dir, step }) => {
      if (!dir.startsWith(root)) return; // another test's manager
      seen.push({
        step,
        latest: Deno.readTextFileSync(join(root, "latest")).trim(),
        complete: manager.list().find((c) => c.dir === dir)?.complete ?? false,
      });
    });
    try {
      manager.save(payloadForStep(6));
      assert.equal(seen.length, 0, "a hook ran before the commit");
      // With nothing else called, the event loop delivers the commit's completion.
      const deadline = Date.now() + 60_000;
      while (seen.length === 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 5));
      }
      assert.deepEqual(seen, [{ step: 6, latest: "step-00000006", complete: true }]);
      manager.save(payloadForStep(7));
      await manager.wait();
      assert.deepEqual(seen.map((s) => s.step), [6, 7], "each hook exactly once");
    } finally {
      remove();
      manager.close();
    }
  });
});

Deno.test("an async save's failure is thrown by the next save, wait or close, once, naming the step, path and cause", async () => {
  await withTempDir(async (root) => {
    const blocker = join(root, "not-a-dir");
    Deno.writeTextFileSync(blocker, "x");
    const manager = new CheckpointManager(blocker, { rank: 0, async: true });
    const cause =
      /Cannot save checkpoint step-00000001 in .*not-a-dir: creating .*not-a-dir failed: .*written in the background/;
    manager.save(payloadForStep(1)); // the snapshot succeeds; the commit cannot
    await assert.rejects(manager.wait(), cause);
    await manager.wait(); // reported once

    manager.save(payloadForStep(1));
    assert.throws(() => manager.save(payloadForStep(2)), cause);
    manager.close(); // step 2 was never started: nothing left to report

    manager.save(payloadForStep(1));
    assert.throws(() => manager.close(), cause);
    assert.deepEqual(waitForCheckpoints(), []);
  });
});

Deno.test("async saves refuse a custom io, and write nothing on other ranks", async () => {
  await withTempDir(async (root) => {
    const io: CheckpointIO = { ...denoCheckpointIO };
    assert.throws(
      () => new CheckpointManager(root, { rank: 0, async: true, io }),
      /cannot use a custom io/,
    );
    const rank1 = new CheckpointManager(join(root, "r1"), { rank: 1, async: true });
    assert.equal(rank1.save(payloadForStep(1)), null);
    await rank1.wait();
    rank1.close();
    assert.deepEqual(names(root), []);
  });
});

for (const mode of ["return", "exit"] as const) {
  Deno.test(`a process that ends right after an async save (${mode}) first makes it durable and runs its hooks`, async () => {
    await withTempDir((root) => {
      const out = new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", EXIT_CHILD, root, mode],
        stdout: "piped",
        stderr: "piped",
      }).outputSync();
      const stdout = new TextDecoder().decode(out.stdout);
      assert.ok(out.success, `child failed: ${new TextDecoder().decode(out.stderr)}`);
      assert.match(stdout, /saved .*step-00000003\nhook 3\n/);
      const manager = new CheckpointManager(root, { rank: 0 });
      assertHoldsPayload(manager.loadLatest()!, payloadForStep(3, { scale: 64 }));
    });
  });
}

Deno.test("a process that ends with a failed async save nobody asked about reports it and exits 1", async () => {
  await withTempDir((root) => {
    const out = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", EXIT_CHILD, root, "fail"],
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 1, stderr);
    assert.match(stderr, /\[dtrain\] Cannot save checkpoint step-00000003 in .*blocker: creating/);
  });
});

Deno.test("SIGTERM during an async commit: the process finishes the commit, then dies of the signal", async () => {
  await withTempDir(async (root) => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", EXIT_CHILD, root, "signal"],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let stdout = "";
    try {
      while (!stdout.includes("saved ")) {
        const { value, done } = await reader.read();
        if (done) break;
        stdout += value;
      }
      child.kill("SIGTERM"); // most likely while the worker is still writing (a few MiB, fsynced)
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        stdout += value;
      }
    } finally {
      reader.releaseLock();
      const status = await child.status;
      const stderr = await new Response(child.stderr).text();
      assert.equal(status.signal, "SIGTERM", `the child ended otherwise: ${stderr}`);
    }
    assert.match(stdout, /saved .*step-00000003/);
    const loaded = new CheckpointManager(root, { rank: 0 }).loadLatest();
    assert.ok(loaded !== null, "the checkpoint in flight at SIGTERM was lost");
    assertHoldsPayload(loaded, payloadForStep(3, { scale: 512 }));
  });
});
