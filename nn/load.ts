/**
 * Loading PyTorch weights into dtrain modules: safetensors files and
 * torch.save files (zip and legacy formats, weights only), a bare state dict
 * or a checkpoint dict holding one (e.g. "model_state_dict"), with or without
 * DDP's "module." prefix.
 */
import { readSafetensorsFile } from "../io/safetensors.ts";
import { readTorchFile } from "../io/torch_load.ts";
import { flattenStateDict, stripModulePrefix } from "../io/state_dict.ts";
import { isStTensor, type StTensor } from "../io/st_tensor.ts";
import type { Module, StateTensor } from "./module.ts";

/**
 * The tensors of a weights file by dotted name (non-tensor entries dropped). Reads a safetensors
 * file or a torch.save file (as `torch.load(path, weights_only=True)`): a state dict, or a
 * checkpoint dict holding one under `key` (default: "model_state_dict", "model" or "state_dict",
 * whichever it has); DDP's "module." prefix is dropped.
 */
export function readWeights(path: string, opts: { key?: string } = {}): Map<string, StTensor> {
  const tensors = new Map<string, StTensor>();
  if (path.endsWith(".safetensors")) {
    for (const [k, t] of readSafetensorsFile(path).tensors) tensors.set(k, t);
  } else {
    let flat: Map<string, unknown>;
    try {
      flat = flattenStateDict(readTorchFile(path));
    } catch (e) {
      const message = (e as Error).message;
      // readTorchFile's errors name the file already; flattening's do not.
      throw message.includes(path) ? e : new Error(`${path}: ${message}`, { cause: e });
    }
    for (const [k, v] of flat) {
      if (isStTensor(v)) tensors.set(k, v);
    }
  }
  let selected = tensors;
  const key = opts.key ?? guessModelKey(tensors);
  if (key) {
    const prefix = key + ".";
    selected = new Map(
      [...tensors].filter(([k]) => k.startsWith(prefix)).map((
        [k, t],
      ) => [k.slice(prefix.length), t]),
    );
    if (selected.size === 0) throw new Error(`${path} has no tensors under "${key}"`);
  }
  return stripModulePrefix(selected);
}

/** "model_state_dict" (or "model", "state_dict") when the file is a checkpoint dict holding one. */
function guessModelKey(tensors: Map<string, StTensor>): string | undefined {
  for (const key of ["model_state_dict", "model", "state_dict"]) {
    if ([...tensors.keys()].some((k) => k.startsWith(key + "."))) return key;
  }
  return undefined;
}

/** A file tensor as a state-dict source. */
export function stateTensor(t: StTensor): StateTensor {
  return { shape: t.shape, dtype: t.dtype.toLowerCase(), bytes: () => t.data };
}

/**
 * Copies the weights of a PyTorch file into `model` (see Module.loadStateDict
 * for strict matching). Tied weights saved under two names load once each.
 */
export function loadWeights(
  model: Module,
  path: string,
  opts: { key?: string; strict?: boolean } = {},
): void {
  const w = readWeights(path, opts);
  model.loadStateDict(new Map([...w].map(([k, t]) => [k, stateTensor(t)])), {
    strict: opts.strict ?? true,
  });
}
