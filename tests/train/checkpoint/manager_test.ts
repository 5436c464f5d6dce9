/**
 * Tests of train/checkpoint/manager.ts in normal operation: exact round trips, the
 * on-disk layout (latest pointer, manifest hashes), rank 0 only, replacing a
 * step, input validation and list().
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { join } from "node:path";
import {
  type CheckpointIO,
  CheckpointManager,
  type CheckpointPayload,
  denoCheckpointIO,
  FOLDER_LOCK_FILE,
} from "../../../train/checkpoint/manager.ts";
import { assertHoldsPayload, payloadForStep, tensor } from "../scripts/checkpoint_payloads.ts";

/** A fresh temporary directory, removed after `fn`. */
function withTempDir(fn: (dir: string) => void): void {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-" });
  try {
    fn(dir);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

/** The folder's entries, without the lock file its writer holds (folder_lock.ts). */
const names = (dir: string) =>
  [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n !== FOLDER_LOCK_FILE).sort();
const text = (path: string) => Deno.readTextFileSync(path);

Deno.test("CheckpointManager.save() and loadLatest() round-trip tensors, metadata and state exactly", () => {
  withTempDir((root) => {
    const warnings: string[] = [];
    const manager = new CheckpointManager(join(root, "ckpt"), {
      rank: 0,
      onWarning: (m) => warnings.push(m),
    });
    assert.equal(manager.loadLatest(), null, "no checkpoint yet");
    const payload = payloadForStep(7);
    const dir = manager.save(payload);
    assert.equal(dir, join(root, "ckpt", "step-00000007"));
    const loaded = manager.loadLatest()!;
    assertHoldsPayload(loaded, payload);
    assert.equal(loaded.dir, dir);
    assert.deepEqual(loaded.skipped, []);
    assertHoldsPayload(manager.load("step-00000007"), payload);
    assertHoldsPayload(manager.load(dir!), payload);
    assert.deepEqual(warnings, []);
  });
});

Deno.test("CheckpointManager.save() lays out step dirs, a latest pointer and a manifest of sha256s", () => {
  withTempDir((root) => {
    const manager = new CheckpointManager(root, { rank: 0 });
    manager.save(payloadForStep(3));
    assert.deepEqual(names(root), ["latest", "step-00000003"]);
    assert.equal(text(join(root, "latest")), "step-00000003\n");
    const dir = join(root, "step-00000003");
    assert.deepEqual(names(dir), [
      "manifest.json",
      "model.safetensors",
      "optimizer.safetensors",
      "state.json",
    ]);
    const manifest = JSON.parse(text(join(dir, "manifest.json")));
    assert.equal(manifest.format, "dtrain-checkpoint");
    assert.equal(manifest.version, 1);
    assert.equal(manifest.step, 3);
    assert.ok(!Number.isNaN(Date.parse(manifest.created)), `created: ${manifest.created}`);
    for (const f of manifest.files) {
      const bytes = Deno.readFileSync(join(dir, f.name));
      assert.equal(f.bytes, bytes.length, f.name);
      assert.equal(f.sha256, createHash("sha256").update(bytes).digest("hex"), f.name);
    }
    assert.deepEqual(manifest.files.map((f: { name: string }) => f.name), [
      "model.safetensors",
      "optimizer.safetensors",
      "state.json",
    ]);
    assert.deepEqual(JSON.parse(text(join(dir, "state.json"))), payloadForStep(3).state);
  });
});

Deno.test("CheckpointManager.save() on a rank other than 0 writes nothing and returns null", () => {
  withTempDir((root) => {
    const dir = join(root, "ckpt");
    const rank1 = new CheckpointManager(dir, { rank: 1 });
    assert.equal(rank1.save(payloadForStep(1)), null);
    assert.equal(names(root).length, 0, "rank 1 must not even create the directory");
    new CheckpointManager(dir, { rank: 0 }).save(payloadForStep(1));
    assertHoldsPayload(rank1.loadLatest()!, payloadForStep(1));
  });
});

Deno.test("CheckpointManager.save() moves latest forward and replaces an existing step", () => {
  withTempDir((root) => {
    const manager = new CheckpointManager(root, {
      rank: 0,
      onWarning: (m) => assert.fail(`unexpected warning: ${m}`),
    });
    manager.save(payloadForStep(1));
    manager.save(payloadForStep(2));
    assert.equal(text(join(root, "latest")), "step-00000002\n");
    const again = payloadForStep(2, { variant: 1 });
    manager.save(again);
    assertHoldsPayload(manager.loadLatest()!, again);
    assert.deepEqual(
      names(root),
      ["latest", "step-00000001", "step-00000002"],
      "no .tmp or .aside left behind",
    );
    assert.deepEqual(manager.list().map((c) => [c.step, c.complete]), [[1, true], [2, true]]);
  });
});

Deno.test("CheckpointManager.save() rejects a bad payload before writing anything", () => {
  withTempDir((root) => {
    const manager = new CheckpointManager(root, { rank: 0 });
    const base = payloadForStep(1);
    const cases: [string, CheckpointPayload, RegExp][] = [
      [
        "NaN in state",
        { ...base, state: { loss: NaN } },
        /Checkpoint state\.loss is NaN; the state must be plain JSON/,
      ],
      [
        "bigint in state",
        { ...base, state: { rng: [{ seed: 5n }] } },
        /state\.rng\[0\]\.seed is a bigint.*decimal string/,
      ],
      ["undefined in state", { ...base, state: { lr: undefined } }, /state\.lr is undefined/],
      ["Map in state", { ...base, state: { m: new Map() } }, /state\.m is a Map/],
      [
        "negative step",
        { ...base, step: -1 },
        /Checkpoint step must be a non-negative integer, got -1/,
      ],
      ["fractional step", { ...base, step: 1.5 }, /non-negative integer, got 1\.5/],
      [
        "path in a file name",
        { ...base, files: [{ name: "../x", tensors: new Map() }] },
        /"\.\.\/x" is not a plain file name/,
      ],
      ["extension in a file name", {
        ...base,
        files: [{ name: "model.safetensors", tensors: new Map() }],
      }, /must leave out "\.safetensors"/],
      [
        "duplicate file",
        { ...base, files: [base.files[0]!, base.files[0]!] },
        /"model" appears twice/,
      ],
      [
        "tensor with the wrong byte count",
        {
          ...base,
          files: [{
            name: "model",
            tensors: new Map([["w", { dtype: "F32", shape: [3], data: new Uint8Array(8) }]]),
          }],
        },
        /Cannot encode checkpoint file model: Tensor "w" has 8 bytes but F32 × \[3\] needs 12/,
      ],
    ];
    for (const [label, payload, pattern] of cases) {
      assert.throws(() => manager.save(payload), (e: unknown) => {
        assert.ok(e instanceof TypeError, `${label}: expected a TypeError, got ${e}`);
        assert.match(e.message, pattern, label);
        return true;
      });
    }
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    assert.throws(
      () => manager.save({ ...base, state: cyclic }),
      /state\.self is a reference to one of its own parents/,
    );
    assert.deepEqual(names(root), [], "nothing may be written for a bad payload");
  });
});

Deno.test("CheckpointManager rejects bad options with the value it got", () => {
  assert.throws(
    () => new CheckpointManager("x", { rank: -1 }),
    /rank must be a non-negative integer, got -1/,
  );
  assert.throws(
    () => new CheckpointManager("x", { rank: 0, keepLast: 0 }),
    /keepLast must be an integer >= 1, got 0/,
  );
  assert.throws(
    () => new CheckpointManager("x", { rank: 0, keepEvery: 2.5 }),
    /keepEvery must be an integer >= 1 \(or left out\), got 2\.5/,
  );
});

Deno.test("CheckpointManager.list() reports step dirs by step, complete only with a valid manifest", () => {
  withTempDir((root) => {
    const manager = new CheckpointManager(root, { rank: 0 });
    assert.deepEqual(new CheckpointManager(join(root, "missing"), { rank: 0 }).list(), []);
    manager.save(payloadForStep(12));
    manager.save(payloadForStep(3));
    Deno.mkdirSync(join(root, "step-00000007")); // a directory without a manifest
    Deno.mkdirSync(join(root, "step-7")); // not a canonical name: not a checkpoint
    Deno.writeTextFileSync(join(root, "step-00000009"), "a file, not a directory");
    assert.deepEqual(manager.list(), [
      { dir: join(root, "step-00000003"), step: 3, complete: true },
      { dir: join(root, "step-00000007"), step: 7, complete: false },
      { dir: join(root, "step-00000012"), step: 12, complete: true },
    ]);
  });
});

Deno.test("CheckpointManager.save() stores any safetensors dtype and empty tensors; steps past 8 digits keep sorting", () => {
  withTempDir((root) => {
    const manager = new CheckpointManager(root, { rank: 0, fsync: false });
    const tensors = new Map([
      ["half", tensor("F16", [2], new Uint16Array([0x3c00, 0xc000]))],
      ["flags", tensor("BOOL", [3], new Uint8Array([1, 0, 1]))],
      ["empty", tensor("F32", [0, 4], new Float32Array(0))],
      ["scalar", tensor("F64", [], new Float64Array([Math.PI]))],
    ]);
    const big: CheckpointPayload = {
      step: 123_456_789,
      files: [{ name: "extra", tensors }],
      state: {},
    };
    manager.save(payloadForStep(99_999_999));
    manager.save(big);
    assert.equal(text(join(root, "latest")), "step-123456789\n");
    assertHoldsPayload(manager.loadLatest()!, big);
    assert.deepEqual(manager.list().map((c) => c.step), [99_999_999, 123_456_789]);
  });
});

/** The file operations of one save of step 2 (after step 1), as "op path(sync)" with the root and random tags elided. */
/** The file operations of a save of step 2, in order; `together`: the IO's syncAll (the default's). */
function recordSave(fsync: boolean, together = true): string[] {
  const log: string[] = [];
  withTempDir((root) => {
    const short = (path: string) => path.replace(root, "<root>").replace(/-\d+-[0-9a-f]{8}/, "-*");
    const recording: CheckpointIO = {
      ...denoCheckpointIO,
      writeFile: (path, bytes, sync) => {
        log.push(`writeFile ${short(path)}${sync ? " (sync)" : ""}`);
        denoCheckpointIO.writeFile(path, bytes, sync);
      },
      rename: (from, to) => {
        log.push(`rename ${short(from)} -> ${short(to)}`);
        denoCheckpointIO.rename(from, to);
      },
      fsyncDir: (path) => {
        log.push(`fsyncDir ${short(path)}`);
        denoCheckpointIO.fsyncDir(path);
      },
      syncAll: together
        ? (paths) => {
          log.push(`syncAll ${paths.map(short).join(" ")}`);
          denoCheckpointIO.syncAll!(paths);
        }
        : undefined,
    };
    const manager = new CheckpointManager(root, { rank: 0, fsync, io: recording });
    manager.save(payloadForStep(1));
    log.length = 0;
    manager.save(payloadForStep(2));
  });
  return log;
}

Deno.test("CheckpointManager.save() flushes the files, their directory and the pointer together before the renames", () => {
  const tmp = "<root>/.tmp-step-00000002-*";
  assert.deepEqual(recordSave(true), [
    `writeFile ${tmp}/model.safetensors`,
    `writeFile ${tmp}/optimizer.safetensors`,
    `writeFile ${tmp}/state.json`,
    `writeFile ${tmp}/manifest.json`,
    "writeFile <root>/.tmp-latest-*",
    `syncAll ${tmp}/model.safetensors ${tmp}/optimizer.safetensors ${tmp}/state.json ` +
    `${tmp}/manifest.json ${tmp} <root>/.tmp-latest-*`,
    `rename ${tmp} -> <root>/step-00000002`,
    "fsyncDir <root>",
    "rename <root>/.tmp-latest-* -> <root>/latest",
    "fsyncDir <root>",
  ]);
  assert.ok(recordSave(false).every((op) => !op.includes("sync")), "fsync: false must not sync");
});

Deno.test("CheckpointManager.save() with an IO that cannot sync together fsyncs each file, then the directory, before each rename it depends on", () => {
  const tmp = "<root>/.tmp-step-00000002-*";
  assert.deepEqual(recordSave(true, false), [
    `writeFile ${tmp}/model.safetensors (sync)`,
    `writeFile ${tmp}/optimizer.safetensors (sync)`,
    `writeFile ${tmp}/state.json (sync)`,
    `writeFile ${tmp}/manifest.json (sync)`,
    `fsyncDir ${tmp}`,
    "writeFile <root>/.tmp-latest-* (sync)",
    `rename ${tmp} -> <root>/step-00000002`,
    "fsyncDir <root>",
    "rename <root>/.tmp-latest-* -> <root>/latest",
    "fsyncDir <root>",
  ]);
  assert.ok(recordSave(false, false).every((op) => !op.includes("sync")), "fsync: false");
});

Deno.test("CheckpointManager.save() that takes more than 2 s prints its progress and its time", () => {
  withTempDir((root) => {
    let now = 0;
    const lines: string[] = [];
    // Each file takes 1.5 s to write on this (simulated) disk.
    const io: CheckpointIO = {
      ...denoCheckpointIO,
      writeFile: (path, bytes, fsync) => {
        now += 1500;
        denoCheckpointIO.writeFile(path, bytes, fsync);
      },
    };
    const manager = new CheckpointManager(join(root, "ckpt"), {
      rank: 0,
      io,
      progress: { print: (l) => lines.push(l), now: () => now },
    });
    manager.save(payloadForStep(3));
    assert.ok(lines.length >= 2, lines.join("\n"));
    assert.match(
      lines[0]!,
      /^saving checkpoint step-00000003: [\d.]+ MB of [\d.]+ MB \(\d+%\), writing \S+ \(\d\.\d s\)$/,
    );
    assert.match(lines.at(-1)!, /^saving checkpoint step-00000003: done in \d+\.\d s$/);
    lines.length = 0;
    const quick = new CheckpointManager(join(root, "quick"), {
      rank: 0,
      progress: { print: (l) => lines.push(l), now: () => 0 },
    });
    quick.save(payloadForStep(4));
    assert.deepEqual(lines, [], "a quick save prints nothing");
  });
});
