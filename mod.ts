/**
 * dtrain: a distributed neural-network trainer for Deno whose arithmetic runs
 * in native kernels (C on CPUs, CUDA on GPUs). This module is the public API
 * a training script imports (`import { … } from "dtrain"` under the launcher).
 *
 * @example
 * ```ts
 * import { AdamW, backward, crossEntropy, fromArray, Linear, manualSeed, ReLU, scope, Sequential } from "dtrain";
 * manualSeed(0);
 * const model = new Sequential(new Linear(4, 8), new ReLU(), new Linear(8, 2));
 * const opt = new AdamW(model.parameters(), { lr: 1e-2 });
 * const x = fromArray(new Float32Array(16).fill(0.5), [4, 4]);
 * const y = fromArray(new Int32Array([0, 1, 0, 1]), [4]);
 * for (let step = 0; step < 10; step++) {
 *   scope(() => {
 *     opt.zeroGrad();
 *     const loss = crossEntropy(model.forward(x), y);
 *     backward(loss);
 *     opt.step();
 *   });
 * }
 * ```
 * @module
 */

// tensors and autograd
export { castTensor, empty, fromArray, full, scope, Tensor, zeros } from "./tensor/tensor.ts";
export type { DType } from "./tensor/dtype.ts";
export { backend, type Device, type DeviceKind, setDevice } from "./tensor/backend.ts";
export {
  describeBackend,
  type DeviceRequest,
  resolveDevice,
  type ResolveDeviceOptions,
  useDevice,
} from "./tensor/device_choice.ts";
export { memoryStats } from "./tensor/allocator.ts";
export { hostSyncCounts } from "./tensor/host_sync.ts";
export { backward, isGradEnabled, noGrad } from "./tensor/autograd.ts";
export { add, cast, div, dropout, gelu, mul, relu, scale, sub } from "./tensor/ops/elementwise.ts";
export {
  clamp,
  type ClampOptions,
  exp,
  log,
  pow,
  sigmoid,
  sqrt,
  tanh,
} from "./tensor/ops/unary.ts";
export { linear, matmul } from "./tensor/ops/linalg.ts";
export { causalSelfAttention, crossEntropy, embedding, layerNorm } from "./tensor/ops/nn.ts";
export { logSoftmax, softmax, type SoftmaxOptions } from "./tensor/ops/softmax.ts";
export { reshape, sliceLast, splitLast } from "./tensor/ops/shape.ts";
export {
  cat,
  expand,
  flatten,
  narrow,
  pad,
  type PadOptions,
  permute,
  squeeze,
  stack,
  transpose,
  unsqueeze,
} from "./tensor/ops/layout.ts";
export {
  argmax,
  argmin,
  max,
  mean,
  min,
  type ReduceOptions,
  sum,
  type ValuesIndices,
} from "./tensor/ops/reduce.ts";
export { gather, indexSelect, maskedFill, where } from "./tensor/ops/select.ts";
export { conv2d, type Conv2dOptions } from "./tensor/ops/conv.ts";
export {
  adaptiveAvgPool2d,
  avgPool2d,
  type AvgPool2dOptions,
  maxPool2d,
  type MaxPool2dOptions,
} from "./tensor/ops/pool.ts";
export {
  batchNorm,
  type BatchNormOptions,
  batchNormReluMaxPool2d,
} from "./tensor/ops/batchnorm.ts";

// layers and models
export { Module, StateDictError, type StateDictSource, type StateTensor } from "./nn/module.ts";
export {
  Dropout,
  Embedding,
  Flatten,
  GELU,
  Identity,
  Layer,
  LayerNorm,
  Linear,
  ReLU,
  Sequential,
} from "./nn/layers.ts";
export { Conv2d, type Conv2dLayerOptions } from "./nn/conv.ts";
export { AdaptiveAvgPool2d, AvgPool2d, MaxPool2d } from "./nn/pooling.ts";
export {
  BatchNorm1d,
  BatchNorm2d,
  type BatchNormLayerOptions,
  convertSyncBatchNorm,
  SyncBatchNorm,
  type SyncBatchNormOptions,
} from "./nn/batchnorm.ts";
export { GPT, type GPTConfig } from "./nn/gpt.ts";
export { getDefaultGenerator, manualSeed } from "./nn/init.ts";
export { getRngState, type RngState, setRngState } from "./nn/rng_state.ts";

// optimizers, schedules, mixed precision
export { AdamW, type AdamWOptions } from "./optim/adamw.ts";
export { SGD, type SGDOptions } from "./optim/sgd.ts";
export { constantLr, LrScheduler, stepLr, warmupCosineLr } from "./optim/lr_schedule.ts";
export { clipGradNorm, gradNorm } from "./optim/clip.ts";
export { autocast } from "./amp/autocast.ts";
export { dropWeightCasts } from "./tensor/weight_cast.ts";
export { GradScaler } from "./amp/grad_scaler.ts";

// data
export { type Dataset, Subset, TensorDataset } from "./data/dataset.ts";
export { type Batch, DataLoader, type DataLoaderState } from "./data/dataloader.ts";
export { DistributedSampler, shardIndices } from "./data/distributed_sampler.ts";
export { type FashionMnist, loadFashionMnist } from "./data/fashion_mnist.ts";
export { ByteImageDataset } from "./data/byte_images.ts";
export { CharWindows, loadCharCorpus } from "./data/char_corpus.ts";

// training engine
export { type FitResult, Trainer, type TrainerOptions } from "./train/engine.ts";
export { resolveConfig, type TrainConfig, type TrainConfigInput } from "./train/config.ts";
export { type EvalOptions, RunLog, type RunLogOptions, type StepInput } from "./train/run_log.ts";
export {
  CheckpointManager,
  type CheckpointManagerOptions,
  type CheckpointPayload,
  type LoadedCheckpoint,
  type SaveOptions,
  waitForCheckpoints,
} from "./train/checkpoint/manager.ts";
export { optimizerFile, restoreOptimizer, tensorFile } from "./train/state.ts";
export { fromStTensor, toStTensor } from "./tensor/st_bridge.ts";
export { loadWeights, readWeights, stateTensor } from "./nn/load.ts";

// distributed
export {
  currentProcessGroup,
  initProcessGroup,
  type ProcessGroup,
} from "./distributed/process_group.ts";
export { DistributedDataParallel } from "./distributed/ddp.ts";
export { stopRequested, stopSignal, watchStopSignals } from "./distributed/stop.ts";
export {
  getStore,
  rankZeroFirst,
  storeBarrier,
  storeKey,
} from "./distributed/control/rank_runtime.ts";
export { getWorld, type World } from "./distributed/control/env.ts";

// random numbers and data order
export { TorchGenerator } from "./random/torch_generator.ts";
export { phase } from "./distributed/control/phase.ts";
