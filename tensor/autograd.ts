/**
 * Reverse-mode autograd over a tape: each op that needs gradients records a
 * Node (its inputs and a backward function next to the forward). backward()
 * sorts the nodes topologically from the loss and sweeps them in reverse,
 * accumulating leaf gradients (parameters) into `tensor.grad` (f32).
 *
 * Gradients are f32, except that an op whose output is bf16/f16 under
 * autocast may return low-precision gradients (as torch's do): a node that
 * declares `lowPrecisionGrad` takes them as they are, any other node gets
 * them widened to f32 first, and a leaf adds them into its f32 grad without
 * a separate cast. The values are those of casting at every step.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { backend } from "./backend.ts";
import { castTensor, empty, full, type Tensor } from "./tensor.ts";
import { DTYPE_CODE } from "./dtype.ts";
import { asMemoryKind } from "./memory_kinds.ts";
import { enter, leave } from "../profile/profile.ts";
import { countingCalls, currentLayer, switchLayer } from "../profile/call_count.ts";
import { anyShardSlots, setBackwardShard, shardScope, shardSlotOf } from "./exact_shards.ts";

/**
 * What a backward function returns for an input whose gradient it has
 * already added into the leaf's own `.grad` (see leafGradSink), e.g. a weight
 * gradient written by the GEMM that computes it.
 */
export const ADDED_TO_LEAF: unique symbol = Symbol("added to the leaf's grad");

/** The gradient of one input: a tensor, null (none), or ADDED_TO_LEAF. */
export type InputGrad = Tensor | null | typeof ADDED_TO_LEAF;

/** One recorded op: given the gradient of its output, the gradients of its inputs. */
export interface Node {
  /** The op's name (as the profiler and error messages print it). */
  readonly name: string;
  /** The op's input tensors, in the order backward() returns their gradients. */
  readonly inputs: readonly Tensor[];
  /** Returns one gradient per input (null where an input needs none). */
  backward(gradOut: Tensor): InputGrad[];
  /** backward() takes gradOut in bf16/f16 as well as f32 (otherwise it is widened to f32 first). */
  readonly lowPrecisionGrad?: boolean;
  /** With DTRAIN_COUNT_CALLS=1: the model layer whose forward recorded the node (-1: none). */
  readonly layer?: number;
  /** In exact mode: the canonical shard whose forward recorded the node (tensor/exact_shards.ts). */
  readonly shard?: number;
}

/**
 * Whether the tape records is a property of the running code, not a global
 * flag: noGrad() runs its function in an async context (node:async_hooks'
 * AsyncLocalStorage, which follows every await and whatever the function
 * starts), so `await noGrad(async () => { for await (… of loader) … })` keeps
 * recording off until the function finishes, while code running meanwhile
 * outside it (a training task, a prefetch) keeps recording. `open` counts
 * the noGrad calls not finished yet: with none, no context is consulted.
 */
const noGradContext = new AsyncLocalStorage<false>();
let open = 0;

/** Whether ops currently record the tape. (torch.is_grad_enabled.) */
export function isGradEnabled(): boolean {
  return open === 0 || noGradContext.getStore() !== false;
}

/**
 * Runs fn without recording the tape (evaluation, weight surgery), as
 * `with torch.no_grad():`. When fn is async (returns a promise) recording
 * stays off for all of it, across every await, until the promise settles;
 * the result is fn's own (the same promise).
 *
 * @example
 * ```ts
 * const acc = await noGrad(async () => {
 *   let correct = 0;
 *   for await (const { tensors: [x, y] } of testLoader) correct += countCorrect(model.forward(x!), y!);
 *   return correct;
 * });
 * ```
 */
export function noGrad<T>(fn: () => T): T {
  open++;
  let result: T;
  try {
    result = noGradContext.run(false, fn);
  } catch (e) {
    open--;
    throw e;
  }
  if (isPromiseLike(result)) {
    const done = () => void open--;
    result.then(done, done);
  } else open--;
  return result;
}

function isPromiseLike(v: unknown): v is PromiseLike<unknown> {
  return typeof v === "object" && v !== null &&
    typeof (v as { then?: unknown }).then === "function";
}

/** True when an op on these inputs must record a node. */
export function needsGrad(...inputs: (Tensor | null | undefined)[]): boolean {
  if (!isGradEnabled()) return false;
  for (const t of inputs) if (t && t.requiresGrad) return true;
  return false;
}

/** Attaches a node to an op's output (the output then requires grad). */
export function record(
  out: Tensor,
  name: string,
  inputs: Tensor[],
  backward: Node["backward"],
  opts: { lowPrecisionGrad?: boolean } = {},
): Tensor {
  out.requiresGrad = true;
  const low = opts.lowPrecisionGrad === true;
  const sharded = shardScope();
  out.node = sharded !== null
    ? { name, inputs, backward, lowPrecisionGrad: low, layer: currentLayer(), shard: sharded.shard }
    : countingCalls
    ? { name, inputs, backward, lowPrecisionGrad: low, layer: currentLayer() }
    : low
    ? { name, inputs, backward, lowPrecisionGrad: true }
    : { name, inputs, backward };
  return out;
}

/**
 * The f32 gradient buffer of a leaf that requires grad, for a backward
 * function to add its gradient into directly (then it returns ADDED_TO_LEAF
 * for that input): `fresh` when the buffer was just allocated and holds
 * nothing yet (the caller must overwrite every element, e.g. a GEMM with beta
 * = 0), else the caller adds to it. null when t is not such a leaf.
 */
export function leafGradSink(t: Tensor): { grad: Tensor; fresh: boolean } | null {
  if (!t.requiresGrad || t.node !== null) return null;
  const slot = anyShardSlots() ? shardSlotOf(t, "a product") : null;
  if (slot !== null) return { grad: slot, fresh: false }; // exact mode: the shard's own slot
  if (t.grad === null) {
    t.grad = asMemoryKind("gradients", () => empty(t.shape, "f32").keep());
    return { grad: t.grad, fresh: true };
  }
  return { grad: t.grad, fresh: false };
}

/** Adds `g` (f32, or bf16/f16 widened exactly) into the f32 `into` (same shape): into += g. */
export function accumulate(into: Tensor, g: Tensor): void {
  const b = backend();
  const n = BigInt(into.numel);
  if (g.dtype === "f32") b.call.dt_axpy(into.ptr, g.ptr, n, 1);
  else b.call.dt_binary_ex(0, into.ptr, 0, into.ptr, 0, g.ptr, DTYPE_CODE[g.dtype], n, n, 1n);
}

/**
 * Watches every backward pass: a hook point for tools built on the library
 * (`dtrain check`'s probe records each loss and the parameters it saw) and
 * for DDP (which all-reduces gradient buckets as soon as they are complete
 * and finds parameters that got no gradient).
 */
export interface BackwardObserver {
  /** A pass starts from `output` (before any gradient is computed). */
  onBackwardStart?(output: Tensor): void;
  /** A leaf's gradient for this pass is complete (called once per reached leaf). */
  onLeafGrad?(leaf: Tensor): void;
  /** The pass ended; `received` holds the leaves that got a gradient. */
  onBackwardEnd?(received: ReadonlySet<Tensor>): void;
}

const observers = new Set<BackwardObserver>();

/** Registers an observer of every backward(); returns the function that removes it. */
export function addBackwardObserver(o: BackwardObserver): () => void {
  observers.add(o);
  return () => observers.delete(o);
}

/** Options of backward(). */
export interface BackwardOptions {
  /** Gradient of the output; default ones (a scalar loss gets 1). */
  gradient?: Tensor;
  /** Called once per leaf when its gradient for this backward is complete. */
  onLeafGrad?: (leaf: Tensor) => void;
  /**
   * A pass run inside another pass's node (activation checkpointing's
   * recomputation, nn/checkpoint.ts): the backward observers do not see it,
   * the outer pass reports its leaves.
   */
  nested?: boolean;
}

/**
 * Computes gradients of `output` with respect to every leaf tensor that
 * requires grad, adding them into leaf.grad (allocated on first use, outside
 * any scope, so it lives as long as the parameter).
 * As `output.backward()` (torch.autograd.backward): a scalar loss gets gradient 1.
 */
export function backward(output: Tensor, opts: BackwardOptions = {}): void {
  const prev = enter("backward");
  const layer = currentLayer();
  try {
    backwardPass(output, opts);
  } finally {
    setBackwardShard(-1);
    if (countingCalls) switchLayer(layer);
    leave(prev);
  }
}

function backwardPass(output: Tensor, opts: BackwardOptions): void {
  if (!output.requiresGrad || !output.node) {
    throw new Error(
      `backward(): the tensor of shape [${output.shape}] does not require grad (no recorded op)`,
    );
  }
  const watchers = opts.nested ? NO_OBSERVERS : observers;
  for (const o of watchers) o.onBackwardStart?.(output);
  // Topological order of the tensors that carry nodes.
  const order: Tensor[] = [];
  const visited = new Set<Tensor>();
  const stack: [Tensor, number][] = [[output, 0]];
  visited.add(output);
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    const [t, i] = top;
    const inputs = t.node!.inputs;
    if (i < inputs.length) {
      top[1]++;
      const inp = inputs[i]!;
      if (inp.node && inp.requiresGrad && !visited.has(inp)) {
        visited.add(inp);
        stack.push([inp, 0]);
      }
    } else {
      stack.pop();
      order.push(t);
    }
  }
  // Number of pending contributions per leaf, so onLeafGrad fires when complete.
  const leafPending = new Map<Tensor, number>();
  for (const t of order) {
    for (const inp of t.node!.inputs) {
      if (inp.requiresGrad && !inp.node) {
        leafPending.set(inp, (leafPending.get(inp) ?? 0) + 1);
      }
    }
  }
  const received = new Set<Tensor>();
  const grads = new Map<Tensor, Tensor>();
  // Exact mode (tensor/exact_shards.ts): leaves' gradients go to per-shard slots.
  const exact = anyShardSlots();
  grads.set(output, opts.gradient ?? full(output.shape, 1));
  for (let k = order.length - 1; k >= 0; k--) {
    const t = order[k]!;
    const g = grads.get(t);
    grads.delete(t);
    if (!g) continue;
    const node = t.node!;
    if (countingCalls) switchLayer(node.layer ?? -1);
    if (exact) setBackwardShard(node.shard ?? -1);
    const inGrads = node.backward(
      g.dtype === "f32" || node.lowPrecisionGrad ? g : castTensor(g, "f32"),
    );
    for (let j = 0; j < node.inputs.length; j++) {
      const inp = node.inputs[j]!;
      const gi = inGrads[j];
      if (!inp.requiresGrad) continue;
      if (gi === ADDED_TO_LEAF) {
        if (inp.node) {
          throw new Error(
            `backward of ${node.name}: input ${j} is not a leaf, so its gradient cannot be added to its .grad`,
          );
        }
        received.add(inp);
        countDownLeaf(inp, leafPending, opts, watchers);
        continue;
      }
      if (!gi) {
        if (!inp.node) countDownLeaf(inp, leafPending, opts, watchers);
        continue;
      }
      if (gi.numel !== inp.numel) {
        throw new Error(
          `backward of ${node.name}: gradient of input ${j} has shape [${gi.shape}], the input has [${inp.shape}]`,
        );
      }
      if (inp.node) {
        if (exact && node.shard !== undefined && inp.node.shard !== node.shard) {
          crossShard(node, inp);
        }
        // Gradients may alias each other (add passes g to both inputs), so a
        // second contribution makes a new tensor instead of writing in place.
        const prev = grads.get(inp);
        grads.set(inp, prev ? sumOf(prev, gi) : gi);
      } else {
        const slot = exact ? shardSlotOf(inp, node.name) : null;
        if (slot !== null) accumulate(slot, gi);
        else {
          if (inp.grad === null) {
            inp.grad = asMemoryKind("gradients", () => empty(inp.shape, "f32").keep().fill(0));
          }
          accumulate(inp.grad, gi);
        }
        received.add(inp);
        countDownLeaf(inp, leafPending, opts, watchers);
      }
    }
  }
  for (const o of watchers) o.onBackwardEnd?.(received);
}

/** A shard's node feeds a tensor recorded outside that shard: its gradient would mix shards. */
function crossShard(node: Node, inp: Tensor): never {
  const where = inp.node!.shard === undefined
    ? "outside the sharded forward"
    : `in shard ${inp.node!.shard}'s forward`;
  throw new Error(
    `exact mode: ${node.name} in shard ${node.shard}'s forward reads a tensor of shape ` +
      `[${inp.shape}] made by ${inp.node!.name} ${where}; each shard's forward must compute ` +
      "what it reads from the parameters itself (a gradient summed across shards inside a " +
      "process depends on the world size)",
  );
}

const NO_OBSERVERS: ReadonlySet<BackwardObserver> = new Set();

/** a + b, two gradients of one tensor: in their dtype when they share one, else in f32. */
function sumOf(a: Tensor, b: Tensor): Tensor {
  const k = backend();
  const n = BigInt(a.numel);
  if (a.dtype === "f32" && b.dtype === "f32") {
    const out = empty(a.shape, "f32");
    k.call.dt_binary(0, out.ptr, a.ptr, b.ptr, n, n, 1n);
    return out;
  }
  const dt = a.dtype === b.dtype ? a.dtype : "f32";
  const out = empty(a.shape, dt);
  k.call.dt_binary_ex(
    0,
    out.ptr,
    DTYPE_CODE[dt],
    a.ptr,
    DTYPE_CODE[a.dtype],
    b.ptr,
    DTYPE_CODE[b.dtype],
    n,
    n,
    1n,
  );
  return out;
}

function countDownLeaf(
  leaf: Tensor,
  pending: Map<Tensor, number>,
  opts: BackwardOptions,
  watchers: ReadonlySet<BackwardObserver>,
): void {
  const left = (pending.get(leaf) ?? 1) - 1;
  pending.set(leaf, left);
  if (left !== 0) return;
  opts.onLeafGrad?.(leaf);
  for (const o of watchers) o.onLeafGrad?.(leaf);
}
