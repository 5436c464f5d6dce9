/**
 * Module: a tree of named parameters, buffers and child modules whose
 * state_dict keys are the dotted names PyTorch uses ("0.weight",
 * "transformer.h.0.attn.c_attn.bias"). A "module." prefix is never written.
 */
import { Tensor } from "../tensor/tensor.ts";
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

/** Tensors marked by Buffer(): a field holding one is registered as a buffer. */
const markedBuffers = new WeakSet<Tensor>();

/**
 * Marks `t` as a trainable parameter (torch's `nn.Parameter`): a Module field
 * holding it is registered as a parameter, `fc.scale = Parameter(ones([4]))`.
 * Any tensor field with requiresGrad counts as one; this only sets the flag.
 */
export function Parameter(t: Tensor): Tensor {
  t.requiresGrad = true;
  structureVersion++; // a module holding it in a field lists its fields again
  return t;
}

/**
 * Marks `t` as a buffer (torch's `nn.Buffer`): a Module field holding it is
 * saved in the state dict but not trained. A plain tensor field (neither a
 * Parameter nor a Buffer) is not registered, as in PyTorch.
 */
export function Buffer(t: Tensor): Tensor {
  markedBuffers.add(t);
  structureVersion++;
  return t;
}

/** Whether `v` is a non-empty array whose elements are modules or such arrays, at any depth. */
function isModuleArray(v: unknown): v is unknown[] {
  return Array.isArray(v) && v.length > 0 &&
    v.every((e) => e instanceof Module || isModuleArray(e));
}

/** The modules of a (nested) module array, flattened. */
function modulesIn(v: unknown[]): Module[] {
  return v.flatMap((e) => e instanceof Module ? [e] : modulesIn(e as unknown[]));
}

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
  /** the own fields' values at the last look for fields to register (see #discoverFields) */
  #fieldValues: unknown[] = [];
  /** the own fields' names at the last look, and the structureVersion they were listed at */
  #fieldKeys: string[] = [];
  #keysAt = -1;
  /** the structureVersion at which this module's whole tree was last looked at */
  #treeAt = -1;
  /** names registered from fields (a field given a new value replaces its entry) */
  readonly #fromFields = new Set<string>();
  /** Training mode (dropout active). */
  training = true;

  constructor() {
    structureVersion++; // a field given this new module is then looked for (see #discoverFields)
  }

  /** Registers a trainable tensor under `name` (it gets requiresGrad). */
  protected registerParameter(name: string, t: Tensor): Tensor {
    t.requiresGrad = true;
    t.keep().countAs("weights");
    this.#params.set(name, t);
    structureVersion++;
    return t;
  }

  /** Registers a non-trainable tensor saved in the state dict. */
  protected registerBuffer(name: string, t: Tensor): Tensor {
    t.keep().countAs("weights");
    this.#buffers.set(name, t);
    return t;
  }

  /** Registers a child module under `name`. */
  protected registerModule<M extends Module>(name: string, m: M): M {
    this.#children.set(name, m);
    structureVersion++;
    return m;
  }

  /**
   * Registers what this module's own fields hold, as torch's
   * `nn.Module.__setattr__` does for attributes: a module (child), a tensor
   * with requiresGrad or made by Parameter() (parameter), a tensor made by
   * Buffer() (buffer), an array of modules, nested or not (a child list named
   * "<field>.0", "<field>.1", … as nn.ModuleList), or an array of parameters
   * (nn.ParameterList). JavaScript assigns a subclass's fields only after the
   * base constructor returned, so they are found here, at the first walk of
   * the tree (and again whenever a field's value changed), in the order the
   * fields were defined, after what the constructors registered explicitly.
   * What is registered already — anywhere in this module's tree, by
   * registerModule/registerParameter or by an earlier look — is not
   * registered again; a name taken by an explicit registration stays its.
   */
  #discoverFields(): void {
    // The fields are looked at again only after a module was made, or something registered or
    // made a Parameter()/Buffer(), anywhere since this module last looked: a field can only have
    // come to hold something new then. parameters() in a training loop costs one compare.
    if (this.#keysAt === structureVersion) return;
    this.#keysAt = structureVersion;
    const self = this as unknown as Record<string, unknown>;
    const keys = Object.keys(self);
    const seen = this.#fieldValues, before = this.#fieldKeys;
    let changed = keys.length !== before.length;
    for (let i = 0; !changed && i < keys.length; i++) {
      changed = keys[i] !== before[i] || self[keys[i]!] !== seen[i];
    }
    if (!changed) return;
    this.#fieldKeys = keys;
    this.#fieldValues = keys.map((k) => self[k]);
    let known: { modules: Set<Module>; tensors: Set<Tensor> } | null = null;
    const isKnown = (v: Module | Tensor) => {
      known ??= this.#registered();
      return v instanceof Module ? known.modules.has(v) : known.tensors.has(v);
    };
    for (const k of keys) {
      const v = self[k];
      const takenExplicitly =
        (this.#children.has(k) || this.#params.has(k) || this.#buffers.has(k)) &&
        !this.#fromFields.has(k);
      if (takenExplicitly) continue;
      const current = this.#children.get(k) ?? this.#params.get(k) ?? this.#buffers.get(k);
      let entry: Module | Tensor | null = null;
      let kind: "module" | "param" | "buffer" = "module";
      if (v instanceof Module) {
        if (v === current || isKnown(v)) continue;
        entry = v;
      } else if (v instanceof Tensor) {
        if (v === current || isKnown(v)) continue;
        if (v.requiresGrad) kind = "param";
        else if (markedBuffers.has(v)) kind = "buffer";
        else continue; // a plain tensor attribute, as in PyTorch
        entry = v;
      } else if (isModuleArray(v)) {
        const mods = modulesIn(v);
        const registered = mods.filter(isKnown);
        if (registered.length === mods.length) continue; // listed by the constructor (Sequential's layers)
        if (registered.length > 0) {
          throw new TypeError(
            `${this.constructor.name}: field "${k}" holds ${mods.length} modules of which ${registered.length} ` +
              `are registered already under other names; register the list as a whole (a field, or ` +
              `registerModule for each) so its names are "${k}.0", "${k}.1", …`,
          );
        }
        entry = new FieldModuleList(v);
      } else if (
        Array.isArray(v) && v.length > 0 && v.every((t) => t instanceof Tensor && t.requiresGrad) &&
        !v.some((t) => isKnown(t as Tensor))
      ) {
        entry = new FieldParameterList(v as Tensor[]);
      } else continue;
      // a new value of the same kind keeps its place (Map.set on a present key), as torch's setattr
      const sameKind = entry instanceof Module
        ? this.#children.has(k)
        : kind === "param"
        ? this.#params.has(k)
        : this.#buffers.has(k);
      if (current !== undefined && !sameKind) this.#unregister(k);
      this.#fromFields.add(k);
      if (entry instanceof Module) this.registerModule(k, entry);
      else if (kind === "param") this.registerParameter(k, entry);
      else this.registerBuffer(k, entry);
      known = null;
    }
  }

  /** Removes `name` from this module's own entries (a field given a new value). */
  #unregister(name: string): void {
    this.#children.delete(name);
    this.#params.delete(name);
    this.#buffers.delete(name);
    structureVersion++;
  }

  /** Every module and tensor registered in this module's tree, itself excluded. */
  #registered(): { modules: Set<Module>; tensors: Set<Tensor> } {
    const modules = new Set<Module>(), tensors = new Set<Tensor>();
    const visit = (m: Module) => {
      for (const t of m.#params.values()) tensors.add(t);
      for (const t of m.#buffers.values()) tensors.add(t);
      for (const c of m.#children.values()) {
        if (modules.has(c)) continue;
        modules.add(c);
        visit(c);
      }
    };
    visit(this);
    return { modules, tensors };
  }

  /** Registers the fields of every module in the tree (see #discoverFields). */
  #discoverTree(): void {
    if (this.#treeAt === structureVersion) return; // nothing was made or registered since
    this.#discoverFields();
    for (const c of this.#children.values()) c.#discoverTree();
    this.#treeAt = structureVersion;
  }

  /** Child modules in registration order. */
  children(): [string, Module][] {
    this.#discoverTree();
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
    this.#discoverTree();
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
    this.#discoverTree();
    return [...this.#walk("buffers")];
  }

  /** Every parameter (tied ones under each name) and buffer, as state_dict(). */
  stateDict(): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    this.#discoverTree();
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
    this.#discoverTree();
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

/** Children made for a field holding an array of modules: torch's nn.ModuleList, "0", "1", … */
class FieldModuleList extends Module {
  constructor(items: readonly unknown[]) {
    super();
    items.forEach((m, i) => {
      this.registerModule(String(i), m instanceof Module ? m : new FieldModuleList(m as unknown[]));
    });
  }
}

/** Parameters of a field holding an array of them: torch's nn.ParameterList, "0", "1", … */
class FieldParameterList extends Module {
  constructor(items: readonly Tensor[]) {
    super();
    items.forEach((t, i) => this.registerParameter(String(i), t));
  }
}
