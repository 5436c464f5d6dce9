/**
 * Module: a tree of named parameters, buffers and child modules whose
 * state_dict keys are the dotted names PyTorch uses ("0.weight",
 * "transformer.h.0.attn.c_attn.bias"). A "module." prefix is never written.
 */
import { type Tensor } from "../tensor/tensor.ts";
import { noGrad } from "../tensor/autograd.ts";
import {
  asStateTensor,
  pickTensors,
  type StateDictSource,
  type StateTensor,
} from "../tensor/state_source.ts";

export type { StateDictSource, StateTensor } from "../tensor/state_source.ts";

/**
 * Problems found when loading a state dict, each listed by name. What `loadStateDict` throws in
 * strict mode, as torch's "Error(s) in loading state_dict".
 */
export class StateDictError extends Error {
  /**
   * The keys missing from the source, those it has that the module lacks, and those whose shapes
   * differ.
   */
  constructor(
    readonly missing: string[],
    readonly unexpected: string[],
    readonly mismatched: {
      name: string;
      expected: readonly number[];
      got: readonly number[];
    }[],
  ) {
    const parts: string[] = [];
    if (missing.length) parts.push(`missing keys: ${missing.join(", ")}`);
    if (unexpected.length) {
      parts.push(`unexpected keys: ${unexpected.join(", ")}`);
    }
    for (const m of mismatched) {
      parts.push(`${m.name}: expected shape [${m.expected}], got [${m.got}]`);
    }
    super(`Cannot load state dict: ${parts.join("; ")}`);
    this.name = "StateDictError";
  }
}

/**
 * Bumped by every registration of a parameter or child anywhere: a module's
 * cached parameter list is valid while this is the value it was built at (a
 * change deep in the tree reaches every ancestor without it knowing them).
 */
let structureVersion = 0;

/**
 * Base class of layers and models. (torch.nn.Module: parameters, buffers and children by name,
 * state dicts, train/eval mode.)
 *
 * @example
 * ```ts
 * import { Linear, Module, relu, type Tensor } from "dtrain";
 * class Mlp extends Module {
 *   fc1 = this.registerModule("fc1", new Linear(4, 16));
 *   fc2 = this.registerModule("fc2", new Linear(16, 2));
 *   forward(x: Tensor): Tensor {
 *     return this.fc2.forward(relu(this.fc1.forward(x)));
 *   }
 * }
 * const model = new Mlp();
 * model.namedParameters().map(([name]) => name); // fc1.weight, fc1.bias, fc2.weight, fc2.bias
 * ```
 */
export abstract class Module {
  /** namedParameters() as last walked, and the structureVersion it was walked at */
  #named: { version: number; list: readonly (readonly [string, Tensor])[] } | null = null;
  readonly #params = new Map<string, Tensor>();
  readonly #buffers = new Map<string, Tensor>();
  readonly #children = new Map<string, Module>();
  /** Training mode (dropout active). */
  training = true;

  /** Registers a trainable tensor under `name` (it gets requiresGrad). */
  protected registerParameter(name: string, t: Tensor): Tensor {
    t.requiresGrad = true;
    t.keep();
    this.#params.set(name, t);
    structureVersion++;
    return t;
  }

  /** Registers a non-trainable tensor saved in the state dict. */
  protected registerBuffer(name: string, t: Tensor): Tensor {
    t.keep();
    this.#buffers.set(name, t);
    return t;
  }

  /** Registers a child module under `name`. */
  protected registerModule<M extends Module>(name: string, m: M): M {
    this.#children.set(name, m);
    structureVersion++;
    return m;
  }

  /** Child modules in registration order. */
  children(): [string, Module][] {
    return [...this.#children];
  }

  /**
   * Registers `m` as child `name`, replacing a child of that name in place
   * (its position in the state dict stays), as torch's add_module.
   */
  addModule<M extends Module>(name: string, m: M): M {
    if (!name || name.includes(".")) {
      throw new RangeError(`addModule: child name "${name}" must be non-empty and contain no "."`);
    }
    return this.registerModule(name, m);
  }

  /**
   * Parameters with their dotted names, in PyTorch's order (own first, then
   * children depth-first); a tensor shared by two names (tied weights) is
   * listed once, under its first name, as named_parameters() does.
   */
  namedParameters(): [string, Tensor][] {
    return this.#namedList().map(([name, t]) => [name, t]);
  }

  /**
   * The parameters, in namedParameters() order. The tree is walked again
   * only after a parameter or child was registered somewhere: a training
   * step's `clipGradNorm(model.parameters(), 1)` costs one array copy.
   */
  parameters(): Tensor[] {
    // a subclass that lists its parameters its own way is asked, as before the cache
    if (this.namedParameters !== Module.prototype.namedParameters) {
      return this.namedParameters().map(([, t]) => t);
    }
    const list = this.#namedList();
    const out = new Array<Tensor>(list.length);
    for (let i = 0; i < list.length; i++) out[i] = list[i]![1];
    return out;
  }

  #namedList(): readonly (readonly [string, Tensor])[] {
    if (this.#named?.version === structureVersion) return this.#named.list;
    const seen = new Set<Tensor>();
    const list: [string, Tensor][] = [];
    for (const [name, t] of this.#walk("params")) {
      if (seen.has(t)) continue;
      seen.add(t);
      list.push([name, t]);
    }
    this.#named = { version: structureVersion, list };
    return list;
  }

  /** Buffers with their dotted names. */
  namedBuffers(): [string, Tensor][] {
    return [...this.#walk("buffers")];
  }

  /** Every parameter (tied ones under each name) and buffer, as state_dict(). */
  stateDict(): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    this.#collectState("", out);
    return out;
  }

  #collectState(prefix: string, out: Map<string, Tensor>): void {
    for (const [n, t] of this.#params) out.set(prefix + n, t);
    for (const [n, t] of this.#buffers) out.set(prefix + n, t);
    for (const [n, m] of this.#children) m.#collectState(`${prefix}${n}.`, out);
  }

  *#walk(kind: "params" | "buffers", prefix = ""): Generator<[string, Tensor]> {
    const own = kind === "params" ? this.#params : this.#buffers;
    for (const [n, t] of own) yield [prefix + n, t];
    for (const [n, m] of this.#children) yield* m.#walk(kind, `${prefix}${n}.`);
  }

  /**
   * Copies tensors into this module's parameters and buffers. The source may
   * be another module's stateDict(), a weights file's tensors, a checkpoint
   * file, or a whole loaded checkpoint (its "model" file is used), e.g.
   * `model.loadStateDict(checkpoints.loadLatest())`. With strict (the
   * default) every key must match: the error lists each missing, unexpected
   * and wrongly shaped entry. A leading "module." on every key (a
   * DDP-wrapped PyTorch model) is accepted.
   */
  loadStateDict(
    source: StateDictSource | null | undefined,
    opts: { strict?: boolean; file?: string } = {},
  ): void {
    const strict = opts.strict ?? true;
    const what = "Module.loadStateDict";
    const given = pickTensors(source, opts.file ?? "model", what);
    let src = new Map<string, StateTensor>();
    for (const [k, v] of given) src.set(k, asStateTensor(k, v, what));
    const keys = [...src.keys()];
    if (keys.length > 0 && keys.every((k) => k.startsWith("module."))) {
      const all = src;
      src = new Map(keys.map((k) => [k.slice("module.".length), all.get(k)!]));
    }
    const mine = this.stateDict();
    const missing = [...mine.keys()].filter((k) => !src.has(k));
    const unexpected = [...src.keys()].filter((k) => !mine.has(k));
    const mismatched: StateDictError["mismatched"] = [];
    for (const [k, t] of mine) {
      const s = src.get(k);
      if (!s) continue;
      const same = s.shape.length === t.shape.length &&
        s.shape.every((d, i) => d === t.shape[i]);
      if (!same) mismatched.push({ name: k, expected: t.shape, got: s.shape });
      else if (s.dtype.toLowerCase() !== t.dtype) {
        mismatched.push({
          name: `${k} (dtype ${s.dtype}, expected ${t.dtype})`,
          expected: t.shape,
          got: s.shape,
        });
      }
    }
    if (
      mismatched.length || (strict && (missing.length || unexpected.length))
    ) {
      throw new StateDictError(
        strict ? missing : [],
        strict ? unexpected : [],
        mismatched,
      );
    }
    noGrad(() => {
      for (const [k, t] of mine) {
        const s = src.get(k);
        if (s) t.copyFromArray(s.bytes());
      }
    });
  }

  /** Sets training mode on this module and its children. */
  train(on = true): this {
    this.training = on;
    for (const [, m] of this.#children) m.train(on);
    return this;
  }

  /** Evaluation mode (dropout off). */
  eval(): this {
    return this.train(false);
  }

  /** Frees every parameter, gradient and buffer. */
  dispose(): void {
    for (const [, t] of this.stateDict()) {
      t.grad?.dispose();
      t.grad = null;
      t.dispose();
    }
  }
}

/** Adapts a Tensor to the StateTensor interface (for module-to-module copies). */
export function tensorSource(t: Tensor): StateTensor {
  return { shape: t.shape, dtype: t.dtype, bytes: () => t.toBytes() };
}
