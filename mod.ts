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
export type { Device, DeviceKind } from "./tensor/backend.ts";
export { backend, type BackendInfo, setDevice } from "./tensor/device_info.ts";
export type {
  CudaAvailability,
  CudaAvailable,
  CudaFlavor,
  CudaLibraries,
  CudaUnavailable,
} from "./ffi/cuda_discovery.ts";
export {
  describeBackend,
  type DeviceRequest,
  resolveDevice,
  type ResolveDeviceOptions,
  useDevice,
} from "./tensor/device_choice.ts";
export { memoryStats } from "./tensor/allocator.ts";
export { hostSyncCounts } from "./tensor/host_sync.ts";
export {
  ADDED_TO_LEAF,
  backward,
  type BackwardOptions,
  type InputGrad,
  isGradEnabled,
  type Node,
  noGrad,
} from "./tensor/autograd.ts";
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
export { linear, type LinearOptions, matmul } from "./tensor/ops/linalg.ts";
export type { LayerNormOptions } from "./tensor/ops/layernorm.ts";
export { causalSelfAttention, embedding, layerNorm } from "./tensor/ops/nn.ts";
/** Comparisons into u8 masks (torch.eq, ne, lt, le, gt, ge) and torch.maximum / minimum. */
export { eq, ge, gt, le, lt, maximum, minimum, ne } from "./tensor/ops/compare.ts";
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
  type StatsBuffer,
} from "./tensor/ops/batchnorm.ts";

// layers and models
export {
  Buffer,
  Module,
  Parameter,
  StateDictError,
  type StateDictSource,
  type StateTensor,
} from "./nn/module.ts";
export type { CheckpointLike, StateEntry, TensorFileLike } from "./tensor/state_source.ts";
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
  BatchNormBase,
  type BatchNormLayerOptions,
  type BatchNormState,
  convertSyncBatchNorm,
  type StatsGroup,
  SyncBatchNorm,
  type SyncBatchNormOptions,
} from "./nn/batchnorm.ts";
export {
  type Block,
  type CausalSelfAttention,
  GPT,
  type GPTConfig,
  type MLP,
  type Transformer,
} from "./nn/gpt.ts";
export { checkpoint } from "./nn/checkpoint.ts";
export { getDefaultGenerator, manualSeed } from "./nn/init.ts";
export { getRngState, type RngState, setRngState } from "./nn/rng_state.ts";
/** Random tensors on PyTorch's generator (torch.rand, randn, randint and their *_like). */
export {
  rand,
  randint,
  randintLike,
  type RandintOptions,
  randLike,
  randn,
  randnLike,
  type RandomOptions,
} from "./nn/random.ts";
/**
 * Losses as torch.nn.functional's (nll_loss, cross_entropy, mse_loss,
 * l1_loss, smooth_l1_loss, binary_cross_entropy[_with_logits]), each with
 * reduction "none" | "mean" | "sum", and as torch.nn's classes
 * (CrossEntropyLoss, ...: the options kept, forward(input, target)).
 */
export {
  BCELoss,
  type BCEOptions,
  BCEWithLogitsLoss,
  type BCEWithLogitsOptions,
  binaryCrossEntropy,
  binaryCrossEntropyWithLogits,
  type ClassLossOptions,
  crossEntropy,
  CrossEntropyLoss,
  type CrossEntropyOptions,
  L1Loss,
  l1Loss,
  type LossOptions,
  MSELoss,
  mseLoss,
  NLLLoss,
  nllLoss,
  type Reduction,
  SmoothL1Loss,
  smoothL1Loss,
  type SmoothL1Options,
} from "./nn/losses.ts";

// optimizers, schedules, mixed precision
export { AdamW, type AdamWOptions, type AdamWOptionsInput } from "./optim/adamw.ts";
export { SGD, type SGDOptions } from "./optim/sgd.ts";
/** torch.optim.Adam (amsgrad), Adadelta, Adagrad (lr_decay) and RMSprop (momentum, centered). */
export { Adam, type AdamOptions } from "./optim/adam.ts";
export { Adadelta, type AdadeltaOptions } from "./optim/adadelta.ts";
export { Adagrad, type AdagradOptions } from "./optim/adagrad.ts";
export { RMSprop, type RMSpropOptions } from "./optim/rmsprop.ts";
export { ElementwiseOptimizer, type ElementwiseState } from "./optim/elementwise_optimizer.ts";
export {
  Optimizer,
  type OptimizerState,
  type ParamGroup,
  type ParamGroupSpec,
} from "./optim/optimizer.ts";
/** torch.optim.lr_scheduler's schedulers, stepped after optimizer.step(). */
export {
  CosineAnnealingLR,
  ExponentialLR,
  LambdaLR,
  LinearLR,
  type LinearLROptions,
  LRSchedulerBase,
  type LRSchedulerState,
  MultiStepLR,
  OneCycleLR,
  type OneCycleLROptions,
  type SchedulableOptimizer,
  SequentialLR,
  StepLR,
} from "./optim/lr_schedulers.ts";
export {
  constantLr,
  type LrFunction,
  LrScheduler,
  stepLr,
  warmupCosineLr,
} from "./optim/lr_schedule.ts";
export { clipGradNorm, gradNorm } from "./optim/clip.ts";
export { autocast } from "./amp/autocast.ts";
export {
  DEFAULT_NUMERICS,
  type NumericsPolicy,
  numericsPolicy,
  PLAIN_NUMERICS,
  resolveNumericsPolicy,
  setNumericsPolicy,
} from "./tensor/numerics_policy.ts";
export { dropWeightCasts } from "./tensor/weight_cast.ts";
/** Live and peak bytes per device and kind (weights, gradients, optimizer state, activations, communication). */
export {
  type DeviceMemory,
  formatMemoryReport,
  memoryByKind,
  type MemoryKind,
} from "./tensor/memory_kinds.ts";
export {
  type FoundInfReducer,
  GradScaler,
  type GradScalerOptions,
  type GradScalerState,
} from "./amp/grad_scaler.ts";

// data
export { type Column, type Dataset, Subset, TensorDataset } from "./data/dataset.ts";
export {
  type Batch,
  DataLoader,
  type DataLoaderOptions,
  type DataLoaderState,
  type Sampler,
} from "./data/dataloader.ts";
export { type OrderOptions, ResumableSampler, type ResumePoint } from "./data/resumable_sampler.ts";
export {
  DistributedSampler,
  type DistributedSamplerOptions,
  shardIndices,
  type ShardOptions,
} from "./data/distributed_sampler.ts";
export {
  type FashionMnist,
  type FashionMnistOptions,
  loadFashionMnist,
  type PixelNormalization,
} from "./data/fashion_mnist.ts";
export { ByteImageDataset } from "./data/byte_images.ts";
export { type CharCorpus, CharWindows, loadCharCorpus } from "./data/char_corpus.ts";
/** Token files read window by window: nanoGPT's .bin, llm.c's .bin, .npy, shard folders. */
export { TokenStream } from "./data/token_file.ts";
export {
  type TokenDType,
  TokenFileError,
  type TokenFormat,
  type TokenLayout,
} from "./data/token_format.ts";
/** nanoGPT's random windows (keyed by seed, rank, step) and consecutive windows as a Dataset. */
export {
  RandomWindows,
  type RandomWindowsOptions,
  TokenWindows,
  windowSeed,
} from "./data/token_windows.ts";
/** GPT-2's BPE (js-tiktoken, offline) and UTF-8 bytes. */
export {
  bytesTokenizer,
  GPT2_EOT,
  GPT2_VOCAB,
  gpt2Tokenizer,
  type Tokenizer,
} from "./data/tokenizer.ts";
/** Text to nanoGPT's train.bin and val.bin, streaming (`dtrain prepare`). */
export { type PrepareProgress, type PrepareResult, prepareTokens } from "./data/prepare_tokens.ts";

// training engine
export { type FitResult, Trainer, type TrainerOptions } from "./train/engine.ts";
export type { EvalStep } from "./train/evaluation.ts";
export { resolveConfig, type TrainConfig, type TrainConfigInput } from "./train/config.ts";
export type { ParamGroupRule } from "./train/config_types.ts";
export {
  type EvalOptions,
  type OrderSource,
  RunLog,
  type RunLogOptions,
  type StepInput,
} from "./train/run_log.ts";
export {
  type CheckpointFile,
  CheckpointManager,
  type CheckpointManagerOptions,
  type CheckpointPayload,
  type LoadedCheckpoint,
  type SaveOptions,
  waitForCheckpoints,
} from "./train/checkpoint/manager.ts";
export type { CheckpointDirEntry, CheckpointIO } from "./train/checkpoint/io.ts";
export type { FolderHolder } from "./train/checkpoint/folder_lock.ts";
export type { CheckpointTensors } from "./train/checkpoint/format.ts";
export type { ProgressOptions } from "./distributed/control/progress.ts";
export { type BestEvaluation, optimizerFile, restoreOptimizer, tensorFile } from "./train/state.ts";
export { fromStTensor, toStTensor } from "./tensor/st_bridge.ts";
export type { StDType, StTensor } from "./io/st_tensor.ts";
export { loadWeights, readWeights, stateTensor } from "./nn/load.ts";

// distributed
export type { CallOptions, ProcessGroup, Work } from "./distributed/process_group.ts";
export { SharedReserveError, type SharedReserveStep } from "./distributed/process_group.ts";
export { currentProcessGroup, initProcessGroup } from "./distributed/init_process_group.ts";
export type { CpuBackend, ProcessGroupOptions } from "./distributed/pg_config.ts";
export type {
  BufferLike,
  CollectiveArray,
  CollectiveBuffer,
  CollectiveDType,
  ReduceOp,
  SharedArrayTypes,
} from "./distributed/backends/collective_buffer.ts";
export {
  type Bucket,
  type DDPBackwardOptions,
  type DDPOptions,
  DistributedDataParallel,
  type ShardedBucket,
} from "./distributed/ddp.ts";
export {
  type OptimizerClass,
  type ShardBucket,
  type ShardMode,
  ZeroRedundancyOptimizer,
  type ZeroRedundancyOptions,
} from "./distributed/zero.ts";
export { stopRequested, stopSignal, watchStopSignals } from "./distributed/stop.ts";
export {
  getStore,
  rankZeroFirst,
  storeBarrier,
  type StoreBarrierOptions,
  storeKey,
} from "./distributed/control/rank_runtime.ts";
export type {
  StoreClient,
  StoreCloseInfo,
  StoreConnectOptions,
  StoreEntry,
} from "./distributed/control/store.ts";
export { getWorld, type Lookup, type World } from "./distributed/control/env.ts";

// random numbers and data order
export { TorchGenerator, type TorchGeneratorState } from "./random/torch_generator.ts";
export { phase } from "./distributed/control/phase.ts";
