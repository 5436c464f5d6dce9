/**
 * Tests of run_record/record.ts and run_record/env_rules.ts: which variables are
 * recorded, versions and machine facts, file and data-order hashes, the
 * attempt bookkeeping of run.json, and atomic writes.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pkg from "../../package.json" with { type: "json" };
import { ENV_EXCLUDED, ENV_RULES, envRule } from "../../run_record/env_rules.ts";
import { MachineSchema, readRunDir, RunRecordSchema } from "../../run_record/format.ts";
import {
  beginAttempt,
  behaviourEnv,
  continueRunRecord,
  finishAttempt,
  machineFacts,
  newRunRecord,
  redactArgv,
  sha256File,
  versions,
  writeConfigRecord,
  writeJsonAtomic,
  writeRunRecord,
  writeRunRecordAsync,
} from "../../run_record/record.ts";
import { orderDigest } from "../../run_record/data_order.ts";
import { nativeVersions } from "../../ffi/native_versions.ts";
import { findLibrary } from "../../ffi/native.ts";
import { baseSpec, configOf, runRecordOf, withTempDir } from "./_fixtures.ts";

Deno.test("behaviourEnv() keeps behaviour-changing variables and drops secrets, run identity and the rest", () => {
  const env = behaviourEnv({
    DTRAIN_NUM_THREADS: "4",
    DTRAIN_CPU_ISA: "avx2",
    DTRAIN_STORE_TOKEN: "s3cr3t",
    DTRAIN_MY_TOKEN_FILE: "/x",
    NCCL_SECRET_KEY: "k",
    DTRAIN_RUN_ID: "20250101-x",
    DTRAIN_RUN_DIR: "/runs/x",
    DTRAIN_LAUNCHER_PID: "12",
    DTRAIN_RESTART_COUNT: "1",
    NCCL_DEBUG: "INFO",
    CUDA_VISIBLE_DEVICES: "0,1",
    OMP_NUM_THREADS: "2",
    LD_LIBRARY_PATH: "/usr/local/cuda/lib64",
    TZ: "UTC",
    HOME: "/root",
    PATH: "/usr/bin",
    RANK: "0",
  });
  assert.deepEqual(env, {
    CUDA_VISIBLE_DEVICES: "0,1",
    DTRAIN_CPU_ISA: "avx2",
    DTRAIN_NUM_THREADS: "4",
    LD_LIBRARY_PATH: "/usr/local/cuda/lib64",
    NCCL_DEBUG: "INFO",
    OMP_NUM_THREADS: "2",
    TZ: "UTC",
  });
  assert.deepEqual(Object.keys(env), Object.keys(env).sort(), "sorted by name");
});

Deno.test("envRule() prefers exact names to prefixes and classifies each variable", () => {
  assert.equal(envRule("DTRAIN_NUM_THREADS")?.effect, "numeric");
  assert.equal(envRule("DTRAIN_LOG_RANKS")?.effect, "cosmetic");
  assert.equal(envRule("DTRAIN_TIMEOUT")?.effect, "tuning");
  assert.equal(envRule("NCCL_ALGO")?.effect, "numeric");
  assert.equal(envRule("NCCL_IB_DISABLE")?.effect, "tuning");
  assert.equal(envRule("CUDA_VISIBLE_DEVICES")?.effect, "selection");
  assert.equal(envRule("DTRAIN_STORE_TOKEN"), null);
  assert.equal(envRule("HOME"), null);
});

Deno.test("versions() records package.json, Deno, V8, TypeScript and the CPU library's build hash", () => {
  const v = versions();
  assert.equal(v.dtrain, pkg.version);
  assert.equal(v.deno, Deno.version.deno);
  assert.equal(v.v8, Deno.version.v8);
  assert.equal(v.typescript, Deno.version.typescript);
  const hashFile = fileURLToPath(new URL("../../build/libdtrain_cpu.so.hash", import.meta.url));
  assert.equal(
    v.native.cpu,
    Deno.readTextFileSync(hashFile).trim(),
    "dt_build_hash() equals the build's .hash file",
  );
  assert.equal(v.cuda, undefined);
  assert.equal(v.nccl, undefined);
});

Deno.test("versions() records the native side as nativeVersions() found it, an unreadable library as unavailable", () => {
  const missing = {
    path: null,
    version: null,
    error: "Cannot find native library libdtrain_cpu.so",
  };
  const gpu = {
    flavor: "cuda" as const,
    kernels: { path: "/lib/libdtrain_cuda.so", version: "cafe", error: null },
    runtime: "12.8",
    driver: "570.86",
    cublasLt: "/lib/libcublasLt.so.12",
    error: null,
  };
  const nccl = { path: "/lib/libnccl.so.2", version: "2.26.2", error: null };
  const names = ["NVIDIA H200"];
  const v = versions({ cpu: missing, gpu, nccl }, names);
  assert.equal(v.native.cpu, "unavailable: Cannot find native library libdtrain_cpu.so");
  assert.equal(v.native.cuda, "cafe");
  assert.deepEqual(v.cuda, { runtime: "12.8", driver: "570.86", gpus: names });
  assert.notEqual(v.cuda!.gpus, names, "copied, not shared");
  assert.equal(v.nccl, "2.26.2");
  assert.equal(v.native.gloo, undefined);
  // The emulated device says so; a GPU stack that is not usable records nothing of the GPU.
  const cpu = { path: "/lib/libdtrain_cpu.so", version: "beef", error: null };
  const emu = versions({ cpu, gpu: { ...gpu, flavor: "cuda-emu" }, nccl }, names);
  assert.equal(emu.cuda!.runtime, "12.8 (emulated)");
  assert.equal(emu.cuda!.driver, "none (emulated device)");
  assert.equal(emu.nccl, "2.26.2 (stand-in)");
  const unusable = { ...gpu, runtime: null, driver: null, error: "the driver sees no GPU" };
  const none = versions({ cpu, gpu: unusable, nccl }, names);
  assert.deepEqual([none.cuda, none.nccl, none.native.cuda], [undefined, undefined, undefined]);
  // Gloo: its build hash and libgloo's version, or why not.
  const gloo = { path: "/lib/libdtrain_gloo.so", version: "f00d", error: null, glooVersion: "0.5" };
  const g = versions({ cpu, gloo });
  assert.deepEqual([g.native.gloo, g.gloo], ["f00d", "0.5"]);
  const noGloo = versions({ cpu, gloo: { ...missing, glooVersion: null } });
  assert.deepEqual([noGloo.native.gloo, noGloo.gloo], [
    "unavailable: Cannot find native library libdtrain_cpu.so",
    undefined,
  ]);
});

Deno.test("nativeVersions() finds the CPU library where a run loads it, with its build hash", () => {
  const n = nativeVersions();
  const hashFile = fileURLToPath(new URL("../../build/libdtrain_cpu.so.hash", import.meta.url));
  assert.equal(n.cpu.version, Deno.readTextFileSync(hashFile).trim());
  assert.equal(n.cpu.path, findLibrary("libdtrain_cpu.so"), "where ffi/native.ts finds it");
  assert.equal(n.cpu.error, null);
  assert.deepEqual([n.gpu, n.nccl, n.gloo], [undefined, undefined, undefined], "only when asked");
});

Deno.test("machineFacts() describes this machine in the run.json schema", () => {
  const m = MachineSchema.parse(machineFacts());
  assert.equal(m.hostname, Deno.hostname());
  assert.equal(m.cpus, navigator.hardwareConcurrency);
  assert.ok(m.memBytes > 0);
  assert.ok(m.cpuModel.length > 0);
});

Deno.test("sha256File() matches the sha256 test vector and a large file hashed in one piece", async () => {
  await withTempDir(async (dir) => {
    const small = join(dir, "abc.txt");
    Deno.writeTextFileSync(small, "abc");
    assert.equal(
      await sha256File(small),
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    );
    const big = new Uint8Array(3 * 65536 + 7).map((_, i) => (i * 31) & 255);
    const path = join(dir, "big.bin");
    Deno.writeFileSync(path, big);
    assert.equal(await sha256File(path), createHash("sha256").update(big).digest("hex"));
    await assert.rejects(() => sha256File(join(dir, "none.ts")), Deno.errors.NotFound);
  });
});

Deno.test("orderDigest() hashes the indices as little-endian int32 and keeps the first 16", async () => {
  const backing = Int32Array.from({ length: 40 }, (_, i) => i * 1000 - 7);
  const indices = backing.subarray(3, 23); // a view with a byte offset
  const bytes = new DataView(new ArrayBuffer(4 * indices.length));
  indices.forEach((v, i) => bytes.setInt32(4 * i, v, true));
  const expected = Array.from(
    new Uint8Array(await crypto.subtle.digest("SHA-256", bytes.buffer)),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("");
  const d = orderDigest(2, 1, indices);
  assert.deepEqual(d, {
    epoch: 2,
    rank: 1,
    count: 20,
    sha256: expected,
    first: Array.from(indices.subarray(0, 16)),
  });
  const short = orderDigest(0, 0, new Int32Array([5, 3]));
  assert.deepEqual(short.first, [5, 3]);
  assert.equal(orderDigest(0, 0, new Int32Array(0)).sha256, createHash("sha256").digest("hex"));
});

Deno.test("redactArgv() hides the rendezvous token in both option spellings", () => {
  assert.deepEqual(
    redactArgv([
      "dtrain",
      "--rdzv-token",
      "abc",
      "--rdzv-token=def",
      "--nproc",
      "2",
      "t.ts",
      "--rdzv-token",
    ]),
    [
      "dtrain",
      "--rdzv-token",
      "<redacted>",
      "--rdzv-token=<redacted>",
      "--nproc",
      "2",
      "t.ts",
      "--rdzv-token",
    ],
  );
});

Deno.test("beginAttempt() and finishAttempt() keep a failed first attempt when the run is restarted", () => {
  let r = runRecordOf(baseSpec(), "/tmp/x");
  r = { ...r, attempts: [], status: "running", endedAt: null };
  r = beginAttempt(r, new Date("2025-01-01T00:00:00Z"));
  assert.equal(r.status, "running");
  assert.throws(() => beginAttempt(r), /attempt 0 has not ended/);
  r = finishAttempt(r, {
    exitCode: 1,
    failingRank: 3,
    reason: "rank 3 exited with 1",
    endedAt: new Date("2025-01-01T00:01:00Z"),
  });
  assert.equal(r.status, "failed");
  assert.equal(r.endedAt, "2025-01-01T00:01:00.000Z");
  assert.throws(() => finishAttempt(r, { exitCode: 0 }), /no attempt is open/);
  r = beginAttempt(r, new Date("2025-01-01T00:02:00Z"));
  assert.equal(r.endedAt, null);
  r = finishAttempt(r, { exitCode: 0, endedAt: new Date("2025-01-01T00:03:00Z") });
  assert.equal(r.status, "succeeded");
  assert.deepEqual(r.attempts.map((a) => [a.attempt, a.exitCode, a.failingRank, a.reason]), [
    [0, 1, 3, "rank 3 exited with 1"],
    [1, 0, null, null],
  ]);
  RunRecordSchema.parse(r);
  const stopped = finishAttempt(beginAttempt(r), {
    exitCode: 130,
    signal: "SIGINT",
    interrupted: true,
  });
  assert.equal(stopped.status, "interrupted");
  assert.equal(
    finishAttempt(beginAttempt(r), { exitCode: null, signal: "SIGKILL" }).status,
    "failed",
  );
});

Deno.test("continueRunRecord() keeps the run's id and attempts, closes one left open, and lists every launch", () => {
  let r = runRecordOf(baseSpec(), "/tmp/x");
  r = { ...r, attempts: [], status: "running", endedAt: null };
  r = finishAttempt(beginAttempt(r, new Date("2025-01-01T00:00:00Z")), {
    exitCode: 1,
    endedAt: new Date("2025-01-01T00:01:00Z"),
  });
  r = beginAttempt(r, new Date("2025-01-01T00:02:00Z")); // its launcher was SIGKILLed: never closed
  const next = continueRunRecord(r, {
    runId: "ignored-new-id",
    name: "ignored",
    argv: ["dtrain", "--nproc", "1", "train.ts", "--resume"],
    cwd: "/srv/jobs",
    script: { path: "/srv/jobs/train.ts", sha256: "a".repeat(64), args: ["--resume"] },
    world: { nnodes: 1, nprocPerNode: 1, hosts: ["h"] },
    versions: r.versions,
    env: {},
    createdAt: new Date("2025-01-02T00:00:00Z"),
  });
  assert.equal(next.runId, r.runId);
  assert.equal(next.name, r.name);
  assert.equal(next.createdAt, r.createdAt);
  assert.deepEqual(next.attempts[0], r.attempts[0]);
  assert.equal(next.attempts[1]!.endedAt, "2025-01-02T00:00:00.000Z");
  assert.match(next.attempts[1]!.reason!, /launcher ended without recording/);
  assert.deepEqual(next.world, { nnodes: 1, nprocPerNode: 1, worldSize: 1, hosts: ["h"] });
  assert.deepEqual(next.launches!.map((l) => [l.firstAttempt, l.command.argv.at(-1)]), [
    [0, r.command.argv.at(-1)],
    [2, "--resume"],
  ]);
  const resumed = finishAttempt(beginAttempt(next), { exitCode: 0 });
  assert.deepEqual(resumed.attempts.map((a) => a.attempt), [0, 1, 2]);
  RunRecordSchema.parse(resumed);
});

Deno.test("writeJsonAtomic() replaces the file whole and leaves no temporary file", async () => {
  await withTempDir((dir) => {
    const path = join(dir, "x.json");
    writeJsonAtomic(path, { a: 1 });
    writeJsonAtomic(path, { a: 2, b: [1, 2] });
    assert.deepEqual(JSON.parse(Deno.readTextFileSync(path)), { a: 2, b: [1, 2] });
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["x.json"]);
    assert.throws(
      () => writeJsonAtomic(join(dir, "no", "x.json"), {}),
      /Cannot write .*no\/x\.json: /,
    );
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["x.json"]);
    Deno.mkdirSync(join(dir, "taken"));
    assert.throws(
      () => writeJsonAtomic(join(dir, "taken"), {}),
      /Cannot write .*taken: /,
      "the rename fails",
    );
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name).sort(), ["taken", "x.json"]);
  });
});

Deno.test("writeRunRecord() validates before writing; writeConfigRecord() writes config.json only once", async () => {
  await withTempDir((dir) => {
    const r = runRecordOf(baseSpec(), dir);
    assert.throws(
      () => writeRunRecord(dir, { ...r, runId: "" }),
      /Cannot write run\.json: runId: /,
    );
    writeRunRecord(dir, r);
    assert.equal(writeConfigRecord(dir, configOf(baseSpec())), true);
    assert.equal(writeConfigRecord(dir, { ...configOf(baseSpec()), seed: 99 }), false);
    const read = readRunDir(dir);
    assert.deepEqual(read.run, r);
    assert.equal(read.config!.seed, baseSpec().seed);
  });
});

Deno.test("docs/RUN_DIR.md lists every recorded and every excluded variable with its effect class", () => {
  const doc = Deno.readTextFileSync(
    fileURLToPath(new URL("../../docs/RUN_DIR.md", import.meta.url)),
  );
  for (const r of ENV_RULES) {
    const row = new RegExp(`\`${r.pattern.replace("*", "\\*")}\`[^|\\n]*\\|\\s*${r.effect}\\s*\\|`);
    assert.match(doc, row, `docs/RUN_DIR.md has a row for ${r.pattern} (${r.effect})`);
  }
  for (const x of ENV_EXCLUDED) {
    assert.ok(doc.includes(x.replaceAll("*", "")), `docs/RUN_DIR.md mentions ${x}`);
  }
});

Deno.test("writeRunRecordAsync() writes what writeRunRecord() writes, and refuses an invalid record", async () => {
  const a = Deno.makeTempDirSync(), b = Deno.makeTempDirSync();
  try {
    const rec = newRunRecord({
      runId: "r1",
      name: "n",
      argv: ["dtrain", "x.ts"],
      cwd: "/",
      script: { path: "/x.ts", sha256: "0".repeat(64), args: [] },
      world: { nnodes: 1, nprocPerNode: 1, hosts: ["h"] },
      versions: versions({ cpu: { path: null, version: "hash", error: null } }),
      env: {},
      machine: machineFacts(),
    });
    writeRunRecord(a, rec);
    await writeRunRecordAsync(b, rec);
    assert.equal(
      Deno.readTextFileSync(join(b, "run.json")),
      Deno.readTextFileSync(join(a, "run.json")),
    );
    assert.deepEqual([...Deno.readDirSync(b)].map((e) => e.name), ["run.json"]);
    await assert.rejects(
      writeRunRecordAsync(b, { ...rec, runId: "" }),
      /run\.json.*runId/s,
    );
  } finally {
    Deno.removeSync(a, { recursive: true });
    Deno.removeSync(b, { recursive: true });
  }
});
