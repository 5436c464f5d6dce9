/**
 * gpu-check step 4c's verdict: the resumed run (second folder) repeats the
 * first run's steps after the checkpoint — losses and gradient norms within
 * `--tol` relative (default 1e-5: the same GPU and kernels give the same
 * bits, a tolerance only for libraries that choose GEMM algorithms at run
 * time), and its first step is the one after the checkpoint. Exit 1 if not.
 *
 *   deno run -A scripts/gpu_check/resume_check.ts <first-run-dir> <resumed-run-dir> [--tol 1e-5]
 */
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: { tol: { type: "string", default: "1e-5" } },
  allowPositionals: true,
});
const [first, resumed] = positionals;
if (!first || !resumed) {
  console.error("usage: resume_check.ts <first-run-dir> <resumed-run-dir> [--tol 1e-5]");
  Deno.exit(2);
}
const tol = Number(values.tol);

function steps(dir: string): Map<number, { loss: number; gradNorm: number | null }> {
  const out = new Map<number, { loss: number; gradNorm: number | null }>();
  for (const line of Deno.readTextFileSync(join(dir, "metrics.jsonl")).split("\n")) {
    if (!line.trim()) continue;
    const m = JSON.parse(line);
    if (typeof m.step === "number" && "loss" in m) {
      out.set(m.step, { loss: Number(m.loss), gradNorm: m.gradNorm });
    }
  }
  return out;
}

const a = steps(first), b = steps(resumed);
const rel = (x: number, y: number) => Math.abs(x - y) / Math.max(Math.abs(y), 1e-12);
const problems: string[] = [];
let worst = 0;
for (const [step, m] of b) {
  const ref = a.get(step);
  if (!ref) {
    problems.push(`step ${step} is not in the first run`);
    continue;
  }
  const e = Math.max(
    rel(m.loss, ref.loss),
    m.gradNorm !== null && ref.gradNorm !== null ? rel(m.gradNorm, ref.gradNorm) : 0,
  );
  worst = Math.max(worst, e);
  if (!(e <= tol)) {
    problems.push(
      `step ${step}: loss ${m.loss} vs ${ref.loss}, grad norm ${m.gradNorm} vs ${ref.gradNorm}`,
    );
  }
}
if (b.size === 0) problems.push("the resumed run logged no step");
const firstStep = Math.min(...b.keys());
console.log(
  `resumed run: steps ${[...b.keys()].join(", ")}; first run: steps ${[...a.keys()].join(", ")}`,
);
if (problems.length) {
  console.log(`SUMMARY the resumed run differs: ${problems.join("; ")}`);
  Deno.exit(1);
}
console.log(
  `SUMMARY resumed at step ${firstStep} and repeated ${b.size} step(s), max rel diff ${
    worst.toExponential(1)
  }`,
);
