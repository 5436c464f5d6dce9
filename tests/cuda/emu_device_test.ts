/**
 * The emulated CUDA device's execution model and runtime, at the C level:
 * tests/cuda/emu_device_probe.cu is compiled with g++ against
 * kernels/cuda_emu (as the library's kernels are) and run once per scenario.
 * Barriers, votes, shuffles, dynamic shared memory, atomics and the launch
 * limits must behave as on a GPU; kernels that break CUDA's rules must fail
 * the launch with a sticky error that says what happened where; memory,
 * copies, stream ordering, events and devices must keep CUDA's semantics.
 */
import assert from "node:assert/strict";
import { emuProbe } from "./_emu_probe.ts";
import { HAVE_EMU } from "../gpu/_emu.ts"; // prints why the emulated-GPU tests skip, where they do

/** The probe, built once. */
const probePath = () => emuProbe("emu_device_probe.cu");

/** The probe's output for `scenario` (it must exit 0), in an environment of only `env`. */
function run(scenario: string, env: Record<string, string> = {}): string {
  const r = new Deno.Command(probePath(), {
    args: [scenario],
    clearEnv: true,
    env,
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  const out = new TextDecoder().decode(r.stdout).trim();
  assert.equal(
    r.code,
    0,
    `${scenario}: exit ${r.code}: ${out} ${new TextDecoder().decode(r.stderr)}`,
  );
  return out;
}

const test = (name: string, fn: () => void) => Deno.test({ name, ignore: !HAVE_EMU, fn });

test("__syncthreads orders shared memory across 1024 threads and 3 blocks", () => {
  assert.equal(run("barrier"), "barrier sums 7979 7979 7979 want 7979");
});

test("__syncthreads_count/and/or vote over the whole block", () => {
  // 1000 threads: 334 multiples of 3; all < 1000; thread 77 exists; all >= 0
  assert.equal(run("votes"), "votes 334 1 1 1");
});

test("warp shuffles (down, xor, up, indexed, width 8) and ballots give a GPU's answers", () => {
  assert.equal(run("warps"), "warps mismatches 0");
});

test("a partial warp's __activemask and ballot cover only the lanes it has", () => {
  // 40 threads: warp 0 full, warp 1 lanes 0-7; even threads vote yes
  assert.equal(run("partial-warp"), "partial-warp ffffffff 55555555 000000ff 00000055");
});

test("dynamic shared memory is poisoned at block start and capped as on Hopper", () => {
  assert.equal(
    run("dynamic-smem"),
    "dynamic-smem poisoned -nan sum 1024; 64 KB without opt-in: cudaErrorInvalidValue, with: " +
      "cudaSuccess; 228 KB opt-in: cudaErrorInvalidValue",
  );
});

test("launches beyond 1024 threads, grid.y 65535, block.z 64 or with a zero extent are refused", () => {
  const out = run("geometry");
  assert.match(
    out,
    /^geometry (cudaErrorInvalidConfiguration ){3}cudaErrorInvalidConfiguration \| invalid configuration/,
  );
  assert.match(out, /write_k at emu_device_probe\.cu:\d+: grid \(0,1,1\)/);
});

for (
  const [scenario, why] of [
    [
      "early-exit",
      /thread \(16,0,0\): exited while 16 other threads of its block wait at __syncthreads/,
    ],
    [
      "two-barriers",
      /reached __syncthreads at emu_device_probe\.cu:\d+ while 1 threads wait at __syncthreads at emu_device_probe\.cu:\d+: threads of a block must meet at the same barrier/,
    ],
    ["mask-excludes-caller", /__shfl_xor_sync with mask 0x0000ffff leaves out its caller, lane 16/],
    [
      "mask-missing-lanes",
      /thread \(32,0,0\): __shfl_down_sync with mask 0xffffffff names lanes 0xffffff00 that warp 1 of this block does not have \(40 threads\)/,
    ],
    [
      "deadlock",
      /deadlock: 1 threads wait at __syncthreads at emu_device_probe\.cu:\d+, 31 in warp operations, 0 exited; warp 0: lanes 0xfffffffe in __shfl_sync/,
    ],
    [
      "outside-mask",
      /thread \(15,0,0\): __shfl_down_sync reads lane 16, which is not in its mask 0x0000ffff/,
    ],
  ] as const
) {
  test(`a kernel breaking CUDA's rules fails with a sticky error naming it: ${scenario}`, () => {
    const [first, after] = run(scenario).split("\n");
    assert.match(
      first!,
      new RegExp(
        `^${scenario}: cudaErrorLaunchFailure: unspecified launch failure \\(emulated device: kernel \\w+ launched at emu_device_probe\\.cu:\\d+: block \\(0,0,0\\)`,
      ),
    );
    assert.match(first!, why);
    assert.equal(after, "after: cudaMalloc cudaErrorLaunchFailure"); // the context stays broken
  });
}

test("memory is poisoned and checked: copy direction, bounds, frees, capacity", () => {
  assert.match(
    run("memory"),
    new RegExp(
      "^memory poisoned 1; wrong direction cudaErrorInvalidValue; past the end cudaErrorInvalidValue " +
        "\\(invalid argument \\(emulated: cudaMemcpyHostToDevice: dst 0x[0-9a-f]+ runs past the end of " +
        "its device allocation\\)\\); free of host memory cudaErrorInvalidValue; double free " +
        "cudaErrorInvalidValue; too much cudaErrorMemoryAllocation$",
    ),
  );
});

test("streams run in order on their own; events order one stream after another", () => {
  assert.equal(
    run("ordering"),
    "ordering without wait 0, with wait 42; event before release cudaErrorNotReady, stream b " +
      "cudaErrorNotReady; after cudaSuccess",
  );
});

test("a copy from pageable memory is staged when cudaMemcpyAsync returns", () => {
  assert.equal(run("staging"), "staging 7");
});

test("atomics are atomic across blocks, and blocks do not run in index order", () => {
  const out = run("atomics");
  assert.match(out, /^atomics sum 768 min 5 order/);
  const order = out.split("order ")[1]!.split(" ").map(Number);
  assert.deepEqual([...order].sort(), [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.notDeepEqual(order, [0, 1, 2, 3, 4, 5, 6, 7]);
});

test("the current device is per host thread; CUDA_VISIBLE_DEVICES maps devices", () => {
  assert.equal(
    run("devices"),
    "devices 8; this thread 7, a new thread 0; bus 0000:17:00.0; dtrain emulated GPU 7 (host CPU), 2 SMs; " +
      "launch on another device's stream cudaErrorInvalidResourceHandle",
  );
  assert.equal(
    run("devices", { CUDA_VISIBLE_DEVICES: "5,2", DTRAIN_CUDA_EMU_SMS: "4" }),
    "devices 2; this thread 1, a new thread 0; bus 0000:12:00.0; dtrain emulated GPU 2 (host CPU), 4 SMs; " +
      "launch on another device's stream cudaErrorInvalidResourceHandle",
  );
});

test("a host thread touching another device's event, stream or memory is refused, naming both devices", () => {
  const out = run("thread-device").split("\n");
  const refused = (api: string, what: string) =>
    `invalid resource handle \\(emulated: ${api}: ${what} of device 1 touched by a host thread whose current ` +
    "device is 0; every thread that touches a device sets it first";
  assert.match(
    out[0]!,
    new RegExp(
      `^device not set: query ${refused("cudaEventQuery", "an event")}.*; copy on its stream ${
        refused("cudaMemcpyAsync", "a stream")
      }.*; copy of its memory ${refused("cudaMemcpyAsync", "memory")}`,
    ),
  );
  assert.equal(out[1], "device set first: query ok; copy on its stream ok; copy of its memory ok");
});
