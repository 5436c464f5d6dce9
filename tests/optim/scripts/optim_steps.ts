/**
 * The optimizer runs of tests/optim/one_launch_test.ts: AdamW and SGD with
 * two parameter groups (different rates and decay), odd sizes, an empty
 * parameter, one whose gradient appears only from step 2 and one past the
 * emulated GPU's grid; the optimizer's native calls are counted per step.
 * Run as a script (`optim_steps.ts <device>`) it does this on that device in
 * a process of its own (the device is process-wide) and prints one JSON line.
 */
import { useDevice } from "../../../tensor/device_choice.ts";
import { backend } from "../../../tensor/backend.ts";
import { fromArray } from "../../../tensor/tensor.ts";
import { AdamW } from "../../../optim/adamw.ts";
import { SGD } from "../../../optim/sgd.ts";
import type { Optimizer } from "../../../optim/optimizer.ts";

/** Parameter sizes: the last one spans more chunks than the emulated grid has blocks. */
export const SIZES = [7, 0, 1000, 33, 4097, 300_001];
export const STEPS = 4;

/** Deterministic values (a small LCG), so every process builds the same data. */
export function values(n: number, seed: number, scale = 1): Float32Array<ArrayBuffer> {
  const out = new Float32Array(n);
  let s = (seed * 2654435761) >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32 - 0.5) * scale;
  }
  return out;
}

/** The gradient of parameter t at step `step`, or null (parameter 3 has none before step 2). */
export function gradient(t: number, step: number): Float32Array<ArrayBuffer> | null {
  return t === 3 && step < 2 ? null : values(SIZES[t]!, 1000 * step + t + 1, 10 ** ((t % 3) - 1));
}

export const ADAMW_GROUPS = [
  { lr: 1e-3, weightDecay: 0.1, betas: [0.9, 0.999] as [number, number], eps: 1e-8 },
  { lr: 3e-3, weightDecay: 0, betas: [0.9, 0.999] as [number, number], eps: 1e-8 },
];
export const SGD_GROUPS = [
  { lr: 0.1, momentum: 0.9, dampening: 0, weightDecay: 0, nesterov: true },
  { lr: 0.05, momentum: 0.5, dampening: 0.1, weightDecay: 1e-3, nesterov: false },
  { lr: 0.2, momentum: 0, dampening: 0, weightDecay: 1e-2, nesterov: false },
];
/** Which group each parameter is in. */
export const ADAMW_GROUP_OF = [0, 0, 1, 1, 0, 1];
export const SGD_GROUP_OF = [0, 1, 2, 1, 2, 0];

/** Runs STEPS steps; returns the final parameters' bytes and the native calls of each step. */
export function runSteps(
  kind: "adamw" | "sgd",
): { params: Uint8Array[]; calls: Record<string, number>[] } {
  const params = SIZES.map((n, t) => {
    const p = fromArray(values(n, t + 1), [n]).keep();
    p.requiresGrad = true;
    return p;
  });
  const groupOf = kind === "adamw" ? ADAMW_GROUP_OF : SGD_GROUP_OF;
  const specs = kind === "adamw" ? ADAMW_GROUPS : SGD_GROUPS;
  const groups = specs.map((h, gi) => ({
    params: params.filter((_, t) => groupOf[t] === gi),
    ...h,
  }));
  const opt: Optimizer<{ lr: number }> = kind === "adamw" ? new AdamW(groups) : new SGD(groups);
  const calls: Record<string, number>[] = [];
  for (let step = 0; step < STEPS; step++) {
    params.forEach((p, t) => {
      const g = gradient(t, step);
      p.grad?.dispose();
      p.grad = g ? fromArray(g, [g.length]).keep() : null;
    });
    calls.push(
      countCalls(["dt_adamw", "dt_adamw_many", "dt_sgd", "dt_sgd_many"], () => opt.step()),
    );
  }
  return { params: params.map((p) => p.toBytes()), calls };
}

/** zeroGrad of an AdamW whose parameters all have gradients: its calls and the gradients after. */
export function zeroGradCalls(): { calls: Record<string, number>; grads: number[][] } {
  const params = SIZES.map((n, t) => {
    const p = fromArray(values(n, t + 1), [n]).keep();
    p.requiresGrad = true;
    p.grad = fromArray(values(n, t + 7), [n]).keep();
    return p;
  });
  const opt = new AdamW([{ params: params.slice(0, 2) }, { params: params.slice(2), lr: 0.5 }]);
  const calls = countCalls(["dt_zero_many", "dt_fill"], () => opt.zeroGrad());
  return { calls, grads: params.map((p) => [...(p.grad!.toArray() as Float32Array)]) };
}

/** How often fn calls each named kernel (the wrappers are swapped for counting ones while it runs). */
function countCalls(names: string[], fn: () => void): Record<string, number> {
  const call = backend().call as unknown as Record<string, (...a: unknown[]) => void>;
  const saved = names.map((n) => call[n]!);
  const counts: Record<string, number> = Object.fromEntries(names.map((n) => [n, 0]));
  names.forEach((n, i) => {
    call[n] = (...a: unknown[]) => {
      counts[n]!++;
      return saved[i]!(...a);
    };
  });
  try {
    fn();
  } finally {
    names.forEach((n, i) => call[n] = saved[i]!);
  }
  return counts;
}

if (import.meta.main) {
  useDevice(Deno.args[0] ?? "cpu");
  const out = Object.fromEntries(
    (["adamw", "sgd"] as const).map((k) => {
      const r = runSteps(k);
      return [k, { params: r.params.map((b) => [...b]), calls: r.calls }];
    }),
  );
  console.log(JSON.stringify(out));
}
