/** What the training test scripts import, plus a tensor-map serializer. */
export { crossEntropy, fromArray, noGrad, scope, TensorDataset, Trainer } from "../../../mod.ts";
import { serializeSafetensors } from "../../../io/safetensors.ts";
import { toStTensor } from "../../../tensor/st_bridge.ts";
import type { Tensor } from "../../../tensor/tensor.ts";

/** safetensors bytes of a state dict. */
export function serializeSafetensorsOf(sd: Map<string, Tensor>): Uint8Array {
  return serializeSafetensors(new Map([...sd].map(([k, t]) => [k, toStTensor(t)])));
}
