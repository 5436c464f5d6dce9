/**
 * The allow-list of Python names a torch checkpoint may reference, as in
 * torch.load(weights_only=True): OrderedDict, the tensor rebuild functions and
 * the typed storages. Other names are refused; nothing is looked up dynamically.
 */
import { printable } from "./_untrusted_text.ts";
import { describePy, PyCallable } from "./pickle.ts";
import type { StDType } from "./st_tensor.ts";
import { type TensorAssembler, TorchStorage, TorchTensor } from "./torch_tensor.ts";

/** A `torch.<X>Storage` class named in a persistent id: it fixes the storage's dtype. */
export class StorageType {
  constructor(readonly qualifiedName: string, readonly dtype: StDType) {}
}

const STORAGE_DTYPES: ReadonlyMap<string, StDType> = new Map([
  ["FloatStorage", "F32"],
  ["DoubleStorage", "F64"],
  ["HalfStorage", "F16"],
  ["BFloat16Storage", "BF16"],
  ["LongStorage", "I64"],
  ["IntStorage", "I32"],
  ["ShortStorage", "I16"],
  ["CharStorage", "I8"],
  ["ByteStorage", "U8"],
  ["BoolStorage", "BOOL"],
]);

/** The error for a name outside the allow-list. */
function forbiddenGlobal(module: string, name: string, source: string): Error {
  return new Error(
    `Forbidden global "${
      printable(`${module}.${name}`)
    }" in ${source}: only state dicts and optimizer states can be loaded`,
  );
}

/**
 * A GLOBAL resolver for one checkpoint: allowed names map to values built
 * here, tensors are registered with `assembler`, anything else throws
 * forbiddenGlobal().
 */
export function torchGlobals(
  assembler: TensorAssembler,
  source: string,
): (module: string, name: string) => unknown {
  const fail = (problem: string): never => assembler.fail(problem);
  const orderedDict = new PyCallable("collections.OrderedDict", (args) => {
    if (args.length === 0) return new Map();
    return fail(
      `collections.OrderedDict was called with ${args.length} arguments; torch.save passes none`,
    );
  });
  const rebuildTensorV2 = new PyCallable("torch._utils._rebuild_tensor_v2", (args) => {
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (args.length !== 6 && args.length !== 7) {
      fail(`_rebuild_tensor_v2 takes 6 or 7 arguments, got ${args.length}`);
    }
    const [storage, offset, size, stride, requiresGrad] = args;
    if (!(storage instanceof TorchStorage)) {
      return fail(`_rebuild_tensor_v2 needs a storage, got ${describePy(storage)}`);
    }
    if (typeof requiresGrad !== "boolean") {
      return fail(`requires_grad is ${describePy(requiresGrad)}, expected a bool`);
    }
    return assembler.add(
      storage,
      count(offset, "storage_offset", fail),
      counts(size, "size", fail),
      counts(stride, "stride", fail),
      requiresGrad,
    );
  });
  const rebuildParameter = new PyCallable("torch._utils._rebuild_parameter", (args) => {
    // (data, requires_grad, backward_hooks): an nn.Parameter saved as such.
    if (args.length !== 3) fail(`_rebuild_parameter takes 3 arguments, got ${args.length}`);
    const [data, requiresGrad] = args;
    if (!(data instanceof TorchTensor)) {
      return fail(`_rebuild_parameter needs a tensor, got ${describePy(data)}`);
    }
    if (typeof requiresGrad !== "boolean") {
      return fail(`requires_grad is ${describePy(requiresGrad)}, expected a bool`);
    }
    data.requiresGrad = requiresGrad;
    return data;
  });

  return (module, name) => {
    if (module === "collections" && name === "OrderedDict") return orderedDict;
    if (module === "torch._utils" && name === "_rebuild_tensor_v2") return rebuildTensorV2;
    if (module === "torch._utils" && name === "_rebuild_parameter") return rebuildParameter;
    const dtype = module === "torch" ? STORAGE_DTYPES.get(name) : undefined;
    if (dtype !== undefined) return new StorageType(`torch.${name}`, dtype);
    throw forbiddenGlobal(module, name, source);
  };
}

/**
 * BUILD for checkpoints: torch sets an OrderedDict's `_metadata` (module
 * versions) and may set attributes of a Parameter; neither matters for the
 * values, so the state is checked and dropped. Anything else is refused.
 */
export function torchBuild(assembler: TensorAssembler): (target: unknown, state: unknown) => void {
  return (target, state) => {
    if (!(target instanceof Map) && !(target instanceof TorchTensor)) {
      assembler.fail(`setting the state of ${describePy(target)} is not allowed`);
    }
    if (state !== null && !(state instanceof Map) && !Array.isArray(state)) {
      assembler.fail(`the state of ${describePy(target)} is ${describePy(state)}, expected a dict`);
    }
  };
}

function count(v: unknown, what: string, fail: (problem: string) => never): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    return fail(
      `${what} is ${
        typeof v === "number" || typeof v === "bigint" ? String(v) : describePy(v)
      }, expected a non-negative integer`,
    );
  }
  return v;
}

function counts(v: unknown, what: string, fail: (problem: string) => never): number[] {
  if (!Array.isArray(v)) return fail(`${what} is ${describePy(v)}, expected a tuple of integers`);
  return v.map((x, i) => count(x, `${what}[${i}]`, fail));
}
