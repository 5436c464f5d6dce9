/**
 * Checkpoint I/O over host memory: safetensors reading and writing,
 * torch.save loading (zip and legacy formats, weights-only), and the helpers
 * that turn a loaded checkpoint into flat, dotted names.
 * @module
 */
export {
  MAX_HEADER_BYTES,
  parseSafetensors,
  readSafetensorsFile,
  type SafetensorsContents,
  serializeSafetensors,
  writeSafetensorsFile,
} from "./safetensors.ts";
export {
  asBigInt64Array,
  asFloat32Array,
  asFloat64Array,
  asInt32Array,
  asUint16Array,
  dtypeSize,
  isStTensor,
  ST_DTYPES,
  type StDType,
  type StTensor,
  tensorFromArray,
} from "./st_tensor.ts";
export { loadTorchFile, readTorchFile, type TorchLoadOptions, TorchTensor } from "./torch_load.ts";
export { flattenStateDict, type JsonLike, stripModulePrefix, toJsonValue } from "./state_dict.ts";
