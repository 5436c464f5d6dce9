/**
 * Activation checkpointing, as torch.utils.checkpoint: `checkpoint(fn,
 * ...inputs)` runs fn but keeps none of its intermediate tensors; backward
 * runs fn again from the same inputs, with the same dropout masks, the same
 * default-generator draws and the same autocast precision, and
 * backpropagates through the recomputation. The gradients are those of the
 * unchecked run bit for bit (the same kernels on the same values), at the
 * cost of a second forward of fn.
 *
 * How it hooks into the tape: the outputs hang off one "hub" node whose
 * inputs are fn's inputs and every parameter fn reached. Autograd runs each
 * output's node (which stores its gradient) before the hub's, so the hub
 * recomputes once with every output's gradient, runs a nested backward pass
 * over the recomputed graph (the observers see only the outer pass, DDP
 * hears of each parameter when the hub's inputs are complete), and hands the
 * inputs' gradients on.
 */
import { shardScope } from "../tensor/exact_shards.ts";
import {
  ADDED_TO_LEAF,
  backward,
  type InputGrad,
  isGradEnabled,
  record,
} from "../tensor/autograd.ts";
import { empty, full, scope, type Tensor } from "../tensor/tensor.ts";
import { matmulLowPrecision, withMatmulPrecision } from "../tensor/matmul_precision.ts";
import { getDefaultGenerator } from "./init.ts";
import type { Dropout } from "./layers.ts";
import { recordingDropoutDraws } from "./dropout_replay.ts";

/**
 * Runs `fn(...inputs)` keeping only the inputs for backward, which
 * recomputes fn (a block of a model: `checkpoint((x) => block.forward(x),
 * x)`). fn returns a tensor or an array of tensors; it must depend on
 * nothing that changes between the forward and the backward besides the
 * random state, which is replayed. Without gradient recording it is fn.
 */
export function checkpoint<T extends Tensor | Tensor[]>(
  fn: (...inputs: Tensor[]) => T,
  ...inputs: Tensor[]
): T {
  if (!isGradEnabled()) return fn(...inputs);
  const sharded = shardScope();
  if (sharded !== null) {
    // The recomputation runs in backward, outside the shard's forward: its dropout masks and
    // gradient slots would not be the shard's.
    throw new Error(
      `exact mode: activation checkpointing is not available (shard ${sharded.shard}'s forward ` +
        "called checkpoint()); train exact runs without it (e.g. GPT's checkpointBlocks: false)",
    );
  }
  const generatorBefore = getDefaultGenerator().getState();
  const precision = matmulLowPrecision();
  const draws = new Map<Dropout, bigint>();
  const given = new Set(inputs);
  // The first forward records the tape as usual, so its outputs are an unchecked forward's bits;
  // the tape and every intermediate tensor go when the scope ends, the outputs stay.
  const { result, leaves } = scope(() => {
    const result = recordingDropoutDraws(draws, () => fn(...inputs));
    const outs: Tensor[] = Array.isArray(result) ? result : [result as Tensor];
    for (const o of outs) {
      if (given.has(o)) {
        throw new Error(
          "checkpoint: fn returned one of its inputs unchanged; checkpoint the part that computes",
        );
      }
    }
    return { result, leaves: leavesReached(outs, given) };
  });
  const outs: Tensor[] = Array.isArray(result) ? result : [result as Tensor];
  const tracked = outs.filter((o) => o.requiresGrad);
  if (tracked.length === 0) return result;
  for (const o of tracked) o.node = null; // the first forward's tape is not kept

  const needGrad = inputs.filter((t) => t.requiresGrad);
  const params = [...leaves];
  const outGrads = new Map<number, Tensor>();
  const hub = empty([1]);
  record(hub, "checkpoint", [...needGrad, ...params], () => {
    const { inputGrads, reached } = recompute();
    outGrads.clear();
    return [
      ...inputGrads,
      ...params.map((p): InputGrad => reached.has(p) ? ADDED_TO_LEAF : null),
    ];
  });
  outs.forEach((o, k) => {
    if (!o.requiresGrad) return;
    record(o, `checkpoint output ${k}`, [hub], (g) => {
      outGrads.set(k, g);
      return [full([1], 0)]; // only so that the hub's node runs, after every output's
    }, { lowPrecisionGrad: true });
  });
  return result;

  /** fn again from the inputs, with the forward's random state, and backward through it. */
  function recompute(): { inputGrads: (Tensor | null)[]; reached: Set<Tensor> } {
    const reached = new Set<Tensor>();
    const detachedGrads = scope(() => {
      const detached = inputs.map((t) => {
        if (!t.requiresGrad) return t;
        const d = t.view(t.shape);
        d.requiresGrad = true;
        return d;
      });
      const again = replaying(() => withMatmulPrecision(precision, () => fn(...detached)));
      const routs: Tensor[] = Array.isArray(again) ? again : [again as Tensor];
      const roots: Tensor[] = [], grads: Tensor[] = [];
      routs.forEach((r, k) => {
        const g = outGrads.get(k);
        if (g && r.requiresGrad) {
          roots.push(r);
          grads.push(g);
        }
      });
      if (roots.length > 0) {
        // one pass from every output that got a gradient, each seeded with it
        const seed = empty([1]);
        record(seed, "checkpoint roots", roots, () => grads, { lowPrecisionGrad: true });
        backward(seed, {
          gradient: full([1], 0),
          nested: true,
          onLeafGrad: (leaf) => reached.add(leaf),
        });
      }
      // the detached inputs' grads are kept tensors: they leave the scope by hand, below
      return detached.map((d) => (d.requiresGrad ? d.grad : null));
    });
    const inputGrads: (Tensor | null)[] = [];
    inputs.forEach((t, i) => {
      if (!t.requiresGrad) return;
      const g = detachedGrads[i] ?? null;
      if (g === null) {
        inputGrads.push(null);
        return;
      }
      inputGrads.push(empty(g.shape, g.dtype).copyFrom(g));
      g.dispose();
    });
    return { inputGrads, reached };
  }

  /** Runs fn with the random state the first forward had, then puts the present one back. */
  function replaying<R>(run: () => R): R {
    const generator = getDefaultGenerator();
    const now = generator.getState();
    const offsets = [...draws.keys()].map((d) => [d, d.offset] as const);
    generator.setState(generatorBefore);
    for (const [d, at] of draws) d.offset = at;
    try {
      return run();
    } finally {
      generator.setState(now);
      for (const [d, at] of offsets) d.offset = at;
    }
  }
}

/** The leaves that require grad (parameters) reached from `outs`, not looking past `inputs`. */
function leavesReached(outs: Tensor[], inputs: ReadonlySet<Tensor>): Set<Tensor> {
  const leaves = new Set<Tensor>();
  const seen = new Set<Tensor>();
  const stack = outs.filter((o) => o.requiresGrad);
  while (stack.length > 0) {
    const t = stack.pop()!;
    if (seen.has(t) || inputs.has(t)) continue;
    seen.add(t);
    if (t.node === null) {
      if (t.requiresGrad) leaves.add(t);
      continue;
    }
    for (const i of t.node.inputs) if (i.requiresGrad) stack.push(i);
  }
  return leaves;
}
