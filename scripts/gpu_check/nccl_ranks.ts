/**
 * gpu-check step 4a/4b: the NCCL process group of a launched job, from the
 * public API only (it runs from the device bundle as plain TypeScript):
 * `dtrain --nproc N --device cuda nccl_ranks.ts`. Every collective on device
 * memory and on host arrays, reductions started during other work and waited
 * for on the GPU, a barrier, and one 64 MiB all-reduce timed; in a world of
 * one rank, also a bad call that must abort the group, then close() again.
 * Rank 0 prints `SUMMARY …`; any wrong value throws (the job fails).
 */
import { fromArray, hostSyncCounts, initProcessGroup, type Tensor, zeros } from "dtrain";

const pg = initProcessGroup({ backend: "nccl" });
const { rank, size } = pg;
const problems: string[] = [];

function dev(t: Tensor) {
  return { ptr: t.ptr, count: t.numel, dtype: "f32" as const, device: "cuda" as const };
}

function expect(what: string, got: ArrayLike<number>, want: ArrayLike<number>): void {
  for (let i = 0; i < want.length; i++) {
    if (!Object.is(got[i], want[i])) {
      problems.push(`${what}: element ${i} is ${got[i]}, expected ${want[i]}`);
      return;
    }
  }
}

const ranks = Array.from({ length: size }, (_, r) => r);
const sum = (f: (r: number) => number) => ranks.reduce((s, r) => s + f(r), 0);

// allReduce on device memory: sum, avg, max, min
for (const op of ["sum", "avg", "max", "min"] as const) {
  const t = fromArray(Float32Array.from({ length: 1000 }, (_, i) => (i % 7) * (rank + 1)));
  pg.allReduce(dev(t), op);
  const want = Float32Array.from({ length: 1000 }, (_, i) => {
    const v = ranks.map((r) => (i % 7) * (r + 1));
    return op === "sum"
      ? sum((r) => (i % 7) * (r + 1))
      : op === "avg"
      ? Math.fround(sum((r) => (i % 7) * (r + 1)) / size)
      : op === "max"
      ? Math.max(...v)
      : Math.min(...v);
  });
  expect(`allReduce ${op}`, t.toArray() as Float32Array, want);
}
// host arrays are staged through the GPU
const host = Float64Array.of(rank + 1, -(rank + 1));
pg.allReduce(host, "sum");
expect("allReduce of a host array", host, [sum((r) => r + 1), -sum((r) => r + 1)]);
// broadcast, allGather, reduceScatter
const b = fromArray(Float32Array.of(rank, rank + 0.5));
pg.broadcast(dev(b), size - 1);
expect("broadcast", b.toArray() as Float32Array, [size - 1, size - 0.5]);
const g = zeros([2 * size]);
pg.allGather(dev(g), dev(fromArray(Float32Array.of(rank, 10 * rank))));
expect("allGather", g.toArray() as Float32Array, ranks.flatMap((r) => [r, 10 * r]));
const rs = zeros([3]);
pg.reduceScatter(
  dev(rs),
  dev(fromArray(Float32Array.from({ length: 3 * size }, (_, i) => i + rank))),
);
expect(
  "reduceScatter",
  rs.toArray() as Float32Array,
  [0, 1, 2].map((j) => sum((r) => 3 * rank + j + r)),
);
// reductions in flight together, waited for on the GPU (no host wait until the read)
const buckets = [1, 2, 3, 4].map((k) => fromArray(new Float32Array(1 << 16).fill(k * (rank + 1))));
const waitsBefore = hostSyncCounts().total;
const works = buckets.map((t) => pg.allReduceStart(dev(t), "sum"));
for (const w of works) w.wait();
const hostWaits = hostSyncCounts().total - waitsBefore;
if (hostWaits !== 0) {
  problems.push(`starting and waiting for 4 reductions made the host wait ${hostWaits} times`);
}
buckets.forEach((t, i) => {
  const v = (t.toArray() as Float32Array)[(1 << 16) - 1]!;
  if (v !== (i + 1) * sum((r) => r + 1)) problems.push(`allReduceStart bucket ${i}: ${v}`);
});
pg.barrier("nccl check");
// bandwidth: one 64 MiB all-reduce (the 3rd of 3, after the paths are set up)
const big = zeros([16 << 20]).fill(1);
let ms = 0;
for (let i = 0; i < 3; i++) {
  pg.barrier("timing");
  const t0 = performance.now();
  pg.allReduce(dev(big), "sum");
  big.toArray().subarray(0, 1); // waits for the reduction
  ms = performance.now() - t0;
}
const busGBs = (2 * (size - 1) / size) * (64 * 2 ** 20) / (ms / 1000) / 1e9;
// a world of one rank may fail on purpose: a bad call aborts the group, close() twice is safe
let abortNote = "";
if (size === 1) {
  try {
    pg.broadcast(dev(b), 5);
    problems.push("broadcast to root 5 of a world of 1 did not fail");
  } catch (e) {
    try {
      pg.allReduce(dev(b), "sum");
      problems.push("a call after the abort did not fail");
    } catch {
      abortNote = `; a bad call aborted the group (${(e as Error).message.slice(0, 60)})`;
    }
  }
}
pg.close();
pg.close();
if (problems.length) throw new Error(`NCCL check on rank ${rank}: ${problems.join("; ")}`);
if (rank === 0) {
  console.log(
    `SUMMARY ${size} rank(s), every collective right, 64 MiB allReduce ${ms.toFixed(1)} ms ` +
      (size > 1 ? `(bus ${busGBs.toFixed(1)} GB/s)` : "(one rank)") + abortNote,
  );
}
