import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { mountsAllowed, REPO, TestRun } from "../launch/launch_helpers.ts";

buildNative({ quiet: true });
const SCRIPT = join(REPO, "tests/distributed/scripts/ddp_cases.ts");

async function runCase(name: string, env: Record<string, string> = {}, prefix?: string[]) {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "2", "--log-ranks", "all", SCRIPT], {
      env: { CASE: name, ...env },
      ...(prefix ? { prefix } : {}),
    });
    return await t.finish(l, 30_000);
  } finally {
    await t.cleanup();
  }
}

Deno.test("DDP broadcasts rank 0's weights at construction and keeps replicas identical after a step", async () => {
  const r = await runCase("broadcast");
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const lines = [...r.stdout.matchAll(/\{"rank".*\}/g)].map((m) => JSON.parse(m[0]));
  assert.equal(lines.length, 2);
  assert.equal(lines[0].atStart, lines[1].atStart);
  // the broadcast wrote the weights in place: no rank uses a low-precision copy cast before it
  assert.equal(lines[0].bf16AtStart, lines[1].bf16AtStart);
  assert.equal(lines[0].afterStep, lines[1].afterStep);
  assert.notEqual(lines[0].atStart, lines[0].afterStep);
});

Deno.test("DDP's bucket goes to shared memory by default (reserved on demand), else to a fixed region, or not at all, with the bits of the buffered path", async () => {
  // 128-byte buffers: the 232-byte bucket goes through them (or in place), not in one barrier
  const env = { DTRAIN_SHM_CHUNK_BYTES: "128" };
  const modes: [string, Record<string, string>, number][] = [
    ["off", { DTRAIN_SHM_SHARED_BYTES: "0" }, 0],
    ["default", {}, 1],
    ["fixed region", { DTRAIN_SHM_SHARED_BYTES: "4096" }, 1],
  ];
  const runs = [];
  for (const [mode, vars, shared] of modes) {
    const r = await runCase("broadcast", { ...env, ...vars });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.doesNotMatch(r.stdout + r.stderr, /out of shared memory/, mode);
    const lines = [...r.stdout.matchAll(/\{"rank".*\}/g)].map((m) => JSON.parse(m[0]));
    assert.equal(lines.length, 2);
    for (const l of lines) assert.equal(l.sharedBuckets, shared, `${mode}: ${JSON.stringify(l)}`);
    runs.push(lines);
  }
  for (const key of ["grads", "afterStep"]) {
    const got: string[] = runs.flat().map((l) => l[key]);
    assert.deepEqual(got, got.map(() => got[0]), key);
  }
  assert.notEqual(runs[1]![0].atStart, runs[1]![0].afterStep);
});

Deno.test("DDP keeps ordinary buckets on both ranks when a rank may not reserve them, and rank 0 says why once", async () => {
  const r = await runCase("broadcast", {
    DTRAIN_SHM_CHUNK_BYTES: "128",
    DTRAIN_SHM_SHARED_LIMIT_BYTES: "1024",
  });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const lines = [...r.stdout.matchAll(/\{"rank".*\}/g)].map((m) => JSON.parse(m[0]));
  assert.equal(lines.length, 2);
  for (const l of lines) assert.equal(l.sharedBuckets, 0, JSON.stringify(l));
  const said = (r.stdout + r.stderr).split("\n").filter((l) => l.includes("[dtrain] DDP keeps"));
  assert.equal(said.length, 1, said.join("\n"));
  assert.match(
    said[0]!,
    /\[dtrain\] DDP keeps its gradient buckets out of shared memory, so their allReduce copies through the group's buffers \(slower\): reserveShared\(4096 bytes per rank\) failed on rank 0: rank 0 may reserve at most 1024 bytes .* To fix: raise DTRAIN_SHM_SHARED_LIMIT_BYTES to at least 4096; DTRAIN_SHM_SHARED_BYTES=0 turns/,
  );
});

Deno.test("ZeRO-2 gives the shared pages of the buckets it stops using back, and the ranks stay identical", async () => {
  const r = await runCase("zero2");
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const lines = [...r.stdout.matchAll(/\{"rank".*\}/g)].map((m) => JSON.parse(m[0]));
  assert.equal(lines.length, 2);
  for (const l of lines) {
    assert.equal(l.sharedBefore, 1, JSON.stringify(l));
    assert.equal(l.sharedAfter, 0, JSON.stringify(l));
    // the bucket's 257 KiB of gradients were written by the first step, then given back
    assert.ok(l.rssBefore >= 256 << 10, `only ${l.rssBefore} bytes of the region resident`);
    assert.ok(l.rssAfter <= 8192, `${l.rssAfter} bytes of the region still resident`);
  }
  assert.equal(lines[0].weights, lines[1].weights);
});

Deno.test({
  name:
    "DDP keeps ordinary buckets on both ranks when /dev/shm has no room for them (ENOSPC at the reservation, no SIGBUS later)",
  ignore: !mountsAllowed(),
  fn: async () => {
    // a 400 KiB /dev/shm of its own: the group's segment (4 KiB buffers) fits, but not both ranks'
    // 260 KiB regions for the zero2 case's bucket, so whichever rank reserves second gets ENOSPC
    const prefix = [
      "unshare",
      "-m",
      "sh",
      "-c",
      'mount -t tmpfs -o size=400k tmpfs /dev/shm && exec "$@"',
      "sh",
    ];
    const r = await runCase("zero2", { DTRAIN_SHM_CHUNK_BYTES: "4096" }, prefix);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const lines = [...r.stdout.matchAll(/\{"rank".*\}/g)].map((m) => JSON.parse(m[0]));
    assert.equal(lines.length, 2);
    for (const l of lines) assert.equal(l.sharedBefore, 0, JSON.stringify(l));
    assert.equal(lines[0].weights, lines[1].weights);
    const said = (r.stdout + r.stderr).split("\n").filter((l) => l.includes("[dtrain] DDP keeps"));
    assert.equal(said.length, 1, said.join("\n"));
    assert.match(
      said[0]!,
      /failed on rank [01]: rank [01] could not reserve 266240 bytes in \/dev\/shm \(No space left on device\): \/dev\/shm is too small or full .* To fix: give \/dev\/shm room for 266240 bytes per rank/,
    );
  },
});

Deno.test("DDP refuses models that differ between ranks and lists the differences by rank", async () => {
  const r = await runCase("mismatch");
  assert.notEqual(r.code, 0);
  assert.match(
    r.stdout + r.stderr,
    /the model differs between ranks: rank 1: 0\.weight:f32\[16,4\] vs rank 0 0\.weight:f32\[8,4\]/,
  );
});

Deno.test("DDP names a trainable parameter that received no gradient", async () => {
  const r = await runCase("unused");
  assert.notEqual(r.code, 0);
  assert.match(
    r.stdout + r.stderr,
    /received no gradient in this backward pass: 3\.weight, 3\.bias/,
  );
});

Deno.test("DDP's step API: ddp.backward returns with the gradients averaged; a deferred sync, backward with ddp.gradReady and the older two calls agree bit for bit; misuse is named", async () => {
  const r = await runCase("api");
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const [a, b] = [...r.stdout.matchAll(/\{"rank".*\}/g)].map((m) => JSON.parse(m[0]));
  assert.ok(a && b, r.stdout);
  for (
    const key of [
      "ddpBackward",
      "twoStepsOneCallEach",
      "deferred",
      "finishAfterOneCall",
      "gradReady",
      "bucketPerParamUnusedAllowed",
      "accumulated",
      "gradsAfterOneCall",
    ]
  ) {
    assert.match(a[key], /^[0-9a-f]{64}$/, `${key}: ${a[key]}`);
    assert.equal(a[key], b[key], `${key}: the ranks' weights differ after the step`);
  }
  assert.equal(a.gradReady, a.ddpBackward, "the two ways of wiring the sync are the same step");
  assert.equal(a.deferred, a.ddpBackward, "a deferred sync finished later is the same step");
  assert.equal(
    a.finishAfterOneCall,
    a.ddpBackward,
    "finishGradSync after one call changes nothing",
  );
  assert.notEqual(
    a.accumulated,
    a.ddpBackward,
    "two accumulated micro-batches are a different step",
  );
  for (const rank of [a, b]) {
    assert.match(
      rank.plainBackward,
      /^error: DDP: backward\(\) ran through the wrapped model without its gradient sync/,
    );
    assert.match(
      rank.unfinished,
      /^error: DDP: forward before the previous backward's gradient sync finished: a deferred sync .* needs ddp\.finishGradSync\(\)/,
    );
  }
});
