/**
 * Progress lines: nothing for a phase shorter than afterMs, then at most one
 * line per everyMs with the amount done (sizes in MB/GB, percentages of a
 * known total) and a closing line; silent where disabled (ranks but 0).
 */
import assert from "node:assert/strict";
import { Progress } from "../../../distributed/control/progress.ts";

function clocked(opts: ConstructorParameters<typeof Progress>[1] = {}) {
  let t = 0;
  const lines: string[] = [];
  const p = new Progress("saving checkpoint", {
    enabled: true,
    print: (l) => lines.push(l),
    now: () => t,
    ...opts,
  });
  return { p, lines, at: (ms: number) => (t = ms) };
}

Deno.test("Progress is silent for a short phase", () => {
  const { p, lines, at } = clocked({ total: 10, unit: "batches" });
  for (let i = 1; i <= 10; i++) {
    at(i * 150);
    p.update(i);
  }
  p.done();
  assert.deepEqual(lines, []);
  assert.equal(p.printed, false);
});

Deno.test("Progress prints after afterMs, at most once per everyMs, then a closing line", () => {
  const { p, lines, at } = clocked({ total: 3e9, unit: "bytes" });
  for (const [ms, done] of [[1000, 1e8], [2100, 5e8], [4000, 9e8], [7200, 2.5e9], [8000, 3e9]]) {
    at(ms!);
    p.update(done!, "optimizer.safetensors");
  }
  p.done("step-00000100");
  assert.deepEqual(lines, [
    "saving checkpoint: 500.0 MB of 3.00 GB (17%), optimizer.safetensors (2.1 s)",
    "saving checkpoint: 2.50 GB of 3.00 GB (83%), optimizer.safetensors (7.2 s)",
    "saving checkpoint: done, step-00000100 in 8.0 s",
  ]);
});

Deno.test("Progress counts items without a total, and prints nothing where disabled", () => {
  const a = clocked({ unit: "batches" });
  a.at(2500);
  a.p.update(40);
  assert.deepEqual(a.lines, ["saving checkpoint: 40 batches (2.5 s)"]);
  const b = clocked({ enabled: false });
  b.at(10_000);
  b.p.update(1);
  b.p.done();
  assert.deepEqual(b.lines, []);
});
