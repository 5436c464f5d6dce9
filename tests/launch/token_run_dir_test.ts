/**
 * The run's secret and its directory: generated tokens, token files that
 * only their owner may read, run ids, and run directories that never clash.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { generateToken, readTokenFile, resolveToken } from "../../launch/token.ts";
import { createRunDir, launchRecordPath, makeRunId, redactToken } from "../../launch/run_dir.ts";

Deno.test("generateToken() gives 64 hex characters, different every time", () => {
  const a = generateToken(), b = generateToken();
  assert.match(a, /^[0-9a-f]{64}$/);
  assert.notEqual(a, b);
  assert.match(resolveToken({ rdzvToken: null, rdzvTokenFile: null }), /^[0-9a-f]{64}$/);
  assert.equal(
    resolveToken({ rdzvToken: "given-token-123456", rdzvTokenFile: null }),
    "given-token-123456",
  );
  assert.throws(
    () => resolveToken({ rdzvToken: "short", rdzvTokenFile: null }),
    /has 5 characters, at least 16 are needed/,
  );
});

Deno.test("readTokenFile() accepts an owner-only file and refuses one others can read", () => {
  const dir = Deno.makeTempDirSync();
  try {
    const path = join(dir, "token");
    Deno.writeTextFileSync(path, "abcdef0123456789abcdef\n");
    Deno.chmodSync(path, 0o600);
    assert.equal(readTokenFile(path), "abcdef0123456789abcdef");
    Deno.chmodSync(path, 0o400);
    assert.equal(readTokenFile(path), "abcdef0123456789abcdef");
    for (const mode of [0o640, 0o604, 0o660, 0o644]) {
      Deno.chmodSync(path, mode);
      assert.throws(
        () => readTokenFile(path),
        /its mode is 0\d+, so other users can read it; run `chmod 600/,
        mode.toString(8),
      );
    }
    assert.throws(
      () => readTokenFile(join(dir, "missing")),
      /Cannot read the rendezvous token file .*missing/,
    );
    Deno.chmodSync(path, 0o600);
    Deno.writeTextFileSync(path, "tiny");
    assert.throws(() => readTokenFile(path), /has 4 characters, at least 16/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("makeRunId() is the UTC time, the script name and a random suffix", () => {
  const id = makeRunId("/somewhere/my train.ts", new Date("2025-11-29T09:30:05.123Z"));
  assert.match(id, /^20251129-093005-my_train-[0-9a-f]{4}$/);
  assert.ok(
    new Set(Array.from({ length: 5 }, () => makeRunId("a.ts"))).size > 1,
    "the suffix is random",
  );
});

Deno.test("createRunDir() never reuses another run's directory on node 0", () => {
  const dir = Deno.makeTempDirSync();
  // Relative to `cwd`, not a chdir: other test files run in this process at the same time.
  const cwd = dir;
  try {
    const a = createRunDir({ runDir: null, runId: "same-id", exclusive: true, cwd });
    const b = createRunDir({ runDir: null, runId: "same-id", exclusive: true, cwd });
    assert.equal(a.dir, join(dir, "runs", "same-id"));
    assert.equal(b.runId, "same-id-2");
    assert.equal(b.dir, join(dir, "runs", "same-id-2"));
    const other = createRunDir({ runDir: null, runId: "same-id", exclusive: false, cwd });
    assert.equal(other.dir, a.dir, "other nodes join node 0's directory");
    const explicit = createRunDir({ runDir: "mine/run", runId: "x", exclusive: true, cwd });
    assert.equal(explicit.dir, join(dir, "mine", "run"));
    assert.equal(launchRecordPath("/r", 0), "/r/launch.json");
    assert.equal(launchRecordPath("/r", 2), "/r/launch-node2.json");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("redactToken() hides the value of --rdzv-token in a recorded command line", () => {
  assert.deepEqual(redactToken(["--nproc", "2", "--rdzv-token", "s3cret", "a.ts"]), [
    "--nproc",
    "2",
    "--rdzv-token",
    "<redacted>",
    "a.ts",
  ]);
  assert.deepEqual(redactToken(["--rdzv-token=s3cret", "a.ts"]), [
    "--rdzv-token=<redacted>",
    "a.ts",
  ]);
  assert.deepEqual(redactToken(["--rdzv-token-file", "f", "a.ts"]), [
    "--rdzv-token-file",
    "f",
    "a.ts",
  ]);
});
