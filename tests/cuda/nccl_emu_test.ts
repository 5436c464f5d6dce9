/**
 * The NCCL stand-in of the emulated device (kernels/nccl_emu) through whole
 * communicator lifecycles, at the C level: tests/cuda/nccl_emu_driver.cpp
 * forks one process per rank. The lifecycle scenarios run against an
 * AddressSanitizer build of the stand-in (its source compiled into the driver
 * with -fsanitize=address -DDT_NCCL_EMU_ASAN), so that a communicator used
 * after it was freed fails the test; each rank also reports how many
 * communicators it has not freed. Every scenario must leave no shared-memory
 * segment behind. The plain build is build/libdtrain_nccl_emu.so itself.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { BUILD_DIR, buildNative } from "../../scripts/build_native.ts";
import { NCCL_SYMBOLS } from "../../ffi/nccl.ts";

import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do
const ROOT = fileURLToPath(new URL("../../", import.meta.url));

const drivers = new Map<string, string>();

/** The driver linked against the ASan stand-in ("asan") or the plain one ("plain"). */
function driver(kind: "asan" | "plain"): string {
  const known = drivers.get(kind);
  if (known) return known;
  buildNative({ quiet: true });
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-nccl-emu-" });
  addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
  const out = join(dir, `driver-${kind}`);
  const standIn = kind === "asan"
    ? [
      "-fsanitize=address",
      "-fno-omit-frame-pointer",
      "-DDT_NCCL_EMU_ASAN",
      `${ROOT}kernels/nccl_emu/nccl_emu.cpp`,
    ]
    : [];
  const r = new Deno.Command("g++", {
    args: [
      "-std=gnu++20",
      "-O1",
      "-g",
      "-pthread",
      `-I${ROOT}kernels/cuda_emu/include`,
      `-I${ROOT}kernels/nccl_emu`,
      ...standIn,
      `${ROOT}tests/cuda/nccl_emu_driver.cpp`,
      `-L${BUILD_DIR}`,
      kind === "asan" ? "-ldtrain_shm" : "-ldtrain_nccl_emu",
      "-ldtrain_cudart_emu",
      `-Wl,-rpath,${BUILD_DIR}`,
      "-o",
      out,
    ],
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  if (!r.success) assert.fail(`g++ nccl_emu_driver.cpp: ${new TextDecoder().decode(r.stderr)}`);
  drivers.set(kind, out);
  return out;
}

interface Outcome {
  code: number;
  /** rank -> its lines, in order */
  ranks: Map<number, string[]>;
  /** the driver's other lines (segments left, crashed ranks) */
  other: string[];
  stderr: string;
}

function run(scenario: string, ranks: number, kind: "asan" | "plain" = "asan"): Outcome {
  const r = new Deno.Command(driver(kind), {
    args: [scenario, String(ranks)],
    clearEnv: true,
    env: { DTRAIN_NCCL_EMU_TIMEOUT_MS: "20000", ASAN_OPTIONS: "detect_leaks=1" },
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  const out: Outcome = {
    code: r.code,
    ranks: new Map(),
    other: [],
    stderr: new TextDecoder().decode(r.stderr),
  };
  for (const line of new TextDecoder().decode(r.stdout).trim().split("\n")) {
    const m = line.match(/^rank (\d+): (.*)$/);
    if (!m) out.other.push(line);
    else out.ranks.set(Number(m[1]), [...(out.ranks.get(Number(m[1])) ?? []), m[2]!]);
  }
  return out;
}

/** Every rank ended cleanly: exit 0, nothing from ASan, every communicator freed, no segment left. */
function assertClean(o: Outcome, ranks: number): void {
  assert.doesNotMatch(o.stderr, /AddressSanitizer|LeakSanitizer/, o.stderr);
  assert.deepEqual(o.other, ["segments left: 0"]);
  assert.equal(o.code, 0, JSON.stringify([...o.ranks]));
  for (let r = 0; r < ranks; r++) assert.equal(o.ranks.get(r)?.at(-1), "live communicators 0");
}

const test = (name: string, fn: () => void) => Deno.test({ name, ignore: !HAVE_EMU, fn });

test("3 ranks start nonblocking and all-reduce, broadcast, all-gather and reduce-scatter right", () => {
  const o = run("collectives", 3);
  assertClean(o, 3);
  for (let r = 0; r < 3; r++) assert.equal(o.ranks.get(r)![0], "collectives done, 0 wrong values");
});

test("the plain build (a list of live communicators instead of ASan) gives the same results", () => {
  const o = run("collectives", 2, "plain");
  assertClean(o, 2);
  for (let r = 0; r < 2; r++) assert.equal(o.ranks.get(r)![0], "collectives done, 0 wrong values");
});

test("two ranks on one GPU are refused, as NCCL refuses them", () => {
  const o = run("duplicate-gpu", 2);
  assertClean(o, 2);
  for (const [r, q] of [[0, 1], [1, 0]]) {
    assert.match(
      o.ranks.get(r)![0]!,
      new RegExp(
        `^start: invalid usage .*: Duplicate GPU detected : rank ${r} and rank ${q} both on CUDA device 0000:10:00\\.0$`,
      ),
    );
  }
});

test("a blocking start on a thread other than the one that chose the GPU lands on GPU 0", () => {
  // the fault of issue 11: ncclCommInitRank on a Deno worker thread
  const o = run("init-on-another-thread", 2);
  assertClean(o, 2);
  for (let r = 0; r < 2; r++) {
    assert.match(
      o.ranks.get(r)![0]!,
      /^blocking start on another thread: invalid usage .*Duplicate GPU detected .*; communicator none$/,
    );
  }
});

test("a start that times out is aborted at once and leaves nothing behind", () => {
  const o = run("init-timeout", 2);
  assertClean(o, 2);
  assert.equal(
    o.ranks.get(0)![0],
    "after 300 ms the start was NCCL operation in progress; abort took < 2 s",
  );
});

test("one rank's abort reaches every rank waiting in a collective", () => {
  const o = run("abort-once", 3);
  assertClean(o, 3);
  assert.equal(o.ranks.get(0)![0], "aborted");
  for (const r of [1, 2]) {
    assert.equal(
      o.ranks.get(r)![0],
      "allReduce: remote process exited or there was a network error within 5 s: " +
        `AllReduce #1 on rank ${r}: rank 0 aborted the communicator: ncclCommAbort was called`,
    );
  }
});

test("a rank that dies is noticed by the others, who then abort", () => {
  const o = run("peer-exits", 3);
  assert.doesNotMatch(o.stderr, /AddressSanitizer/);
  assert.deepEqual(o.other, ["segments left: 0"]);
  for (const r of [0, 1]) {
    assert.match(
      o.ranks.get(r)![0]!,
      /^allReduce: remote process exited or there was a network error: AllReduce #1 on rank \d: .*rank 2 \(pid \d+\) exited$/,
    );
    assert.equal(o.ranks.get(r)!.at(-1), "live communicators 0");
  }
});

test("collectives refuse host memory, another device's stream and unsupported arguments", () => {
  const o = run("bad-arguments", 2);
  assertClean(o, 2);
  assert.match(
    o.ranks.get(1)![0]!,
    /^host memory: invalid argument .*\(AllReduce : sendbuff 0x[0-9a-f]+ is not 256 bytes of memory on CUDA device 1\); another device's stream: invalid usage .*\(AllReduce : the stream belongs to CUDA device 2, the communicator to device 1\); prod: invalid argument .*; root 2: invalid argument .*; 65 of 64 floats: invalid argument/,
  );
});

test("aborting a communicator twice is a use after free that the ASan build reports", () => {
  const o = run("double-abort", 2);
  assert.match(o.stderr, /ERROR: AddressSanitizer: heap-use-after-free/);
  assert.match(o.stderr, /in release .*nccl_emu\.cpp:\d+/); // the second ncclCommAbort
  assert.match(o.stderr, /freed by thread T0 here:[^]*in unref /);
  assert.notEqual(o.code, 0);
  // without ASan the list of live communicators answers instead
  const plain = run("double-abort", 2, "plain");
  assert.match(
    plain.ranks.get(0)![0]!,
    /^aborted; aborted again: invalid argument .*: ncclCommAbort: communicator 0x[0-9a-f]+ is not live/,
  );
});

test("libdtrain_nccl_emu.so opens with ffi/nccl.ts's table and has the rest of the subset", () => {
  buildNative({ quiet: true });
  const path = join(BUILD_DIR, "libdtrain_nccl_emu.so");
  const lib = Deno.dlopen(path, NCCL_SYMBOLS);
  try {
    const v = new Int32Array(1);
    assert.equal(lib.symbols.ncclGetVersion(v), 0);
    assert.equal(v[0], 22700);
    assert.equal(
      Deno.UnsafePointerView.getCString(lib.symbols.ncclGetErrorString(7)!),
      "NCCL operation in progress",
    );
  } finally {
    lib.close();
  }
  const nm = new Deno.Command("nm", { args: ["-D", "--defined-only", path], stdout: "piped" })
    .outputSync();
  const exported = new TextDecoder().decode(nm.stdout).split("\n").map((l) => l.split(" ")[2]);
  for (
    const name of [
      "ncclCommInitRankConfig",
      "ncclGroupStart",
      "ncclGroupEnd",
      "ncclCommCuDevice",
      "dt_nccl_emu_live_communicators",
    ]
  ) {
    assert.ok(exported.includes(name), `${name} is not exported`);
  }
});
