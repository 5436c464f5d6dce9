/**
 * The training configuration's types, written out so that the API reference
 * shows every section and field with its doc. train/config.ts's zod schema
 * is the source of the defaults and the checks; it asserts at compile time
 * that these types are exactly what the schema parses and accepts, so a
 * field added there without being added here fails `deno check`.
 */

/** One parameter group of `optim.groups` with every default filled in. */
export interface ParamGroupRule {
  /** Parameters whose dotted name matches this regular expression (null: any name). */
  names: string | null;
  /** Parameters with at least this many dims (null: any). */
  minDims: number | null;
  /** Parameters with at most this many dims (1: biases and norm weights). */
  maxDims: number | null;
  /** The group's learning rate (null: optim.lr); the schedule scales it by optim.lr's factor. */
  lr: number | null;
  /** The group's weight decay (null: optim.weightDecay). */
  weightDecay: number | null;
}

/**
 * The validated training configuration with every default filled in
 * (what `resolveConfig` returns and the Trainer reads). Each section is
 * strict: a misspelled key is an error naming the nearest valid field.
 */
export type TrainConfig = {
  /** Passes over the training data (default 1). */
  epochs: number;
  /** Stop after this many optimizer steps in total (null: run every epoch). */
  maxSteps: number | null;
  /** Seed of parameter init (manualSeed), data order and dropout (default 0). */
  seed: number;
  /** How batches are formed. */
  data: {
    /** Samples per optimizer step over all ranks and micro-batches (default 64). */
    globalBatchSize: number;
    /** Micro-batches accumulated per optimizer step (noSync on all but the last; default 1). */
    gradAccumulation: number;
    /** Reshuffle every epoch (DistributedSampler, torch's order for the same seed; default true). */
    shuffle: boolean;
    /** Drop the tail instead of padding by repeating the first indices (default false). */
    dropLast: boolean;
    /** Batches prepared ahead in the background (default 2). */
    prefetch: number;
  };
  /** The optimizer and its hyperparameters. */
  optim: {
    /** "adamw" (default), "sgd", "adam", "adadelta", "adagrad" or "rmsprop" (torch.optim's classes). */
    name: "adamw" | "sgd" | "adam" | "adadelta" | "adagrad" | "rmsprop";
    /** Peak learning rate (default 1e-3). */
    lr: number;
    /** Decoupled (AdamW) or L2 (SGD) weight decay (default 1e-2). */
    weightDecay: number;
    /** AdamW betas (default [0.9, 0.999]). */
    betas: [number, number];
    /** AdamW epsilon (default 1e-8). */
    eps: number;
    /** SGD and RMSprop momentum (default 0). */
    momentum: number;
    /** Adam's AMSGrad variant (default false). */
    amsgrad: boolean;
    /** RMSprop smoothing constant (default 0.99). */
    alpha: number;
    /** RMSprop centered: normalised by the gradient's variance (default false). */
    centered: boolean;
    /** Adadelta smoothing constant (default 0.9). */
    rho: number;
    /** Adagrad learning-rate decay (default 0). */
    lrDecay: number;
    /** SGD Nesterov momentum (default false). */
    nesterov: boolean;
    /**
     * Parameter groups with their own weight decay or learning rate; a
     * parameter joins the first group it matches, the rest form a last group
     * with the settings above. nanoGPT's rule: [{ maxDims: 1, weightDecay: 0 }].
     */
    groups: ParamGroupRule[];
  };
  /** The learning-rate schedule. */
  schedule: {
    /** "constant" (default), "cosine" (linear warmup then cosine decay) or "step". */
    kind: "constant" | "cosine" | "step";
    /** Warmup steps of the cosine schedule (default 0). */
    warmupSteps: number;
    /** Final learning rate of the cosine schedule (default 0). */
    minLr: number;
    /** Steps between decays of the step schedule (default 1000). */
    stepSize: number;
    /** Decay factor of the step schedule (default 0.1). */
    gamma: number;
  };
  /** Mixed precision. */
  precision: {
    /** Low precision of matmul-class ops under autocast ("f32", the default: autocast off). */
    autocast: "f32" | "bf16" | "f16";
    /** Dynamic loss scaling (null, the default: on for f16 only). */
    gradScaler: boolean | null;
  };
  /** Clip the global gradient L2 norm to this value (null: no clipping). */
  clipGradNorm: number | null;
  /**
   * The numerics policy (`NumericsPolicy`) the Trainer sets for its process:
   * what of the arithmetic above it allows. Defaults allow all.
   */
  numerics: {
    /** "as-called" (default): autocast in precision.autocast; "f32": every region in f32. */
    autocast: "as-called" | "f32";
    /** false: no loss scaling, whatever precision.gradScaler says (said once in the log). */
    lossScaling: boolean;
    /** false: clipGradNorm is measured, not applied (said once in the log). */
    clipping: boolean;
    /** false: Dropout layers pass their input through (said once in the log). */
    dropout: boolean;
    /** Reductions in a fixed order; every kernel of this build has only these (false is refused). */
    deterministicReductions: boolean;
    /** TF32-like GPU products; no kernel of this build has them (true is refused). */
    tf32: boolean;
    /** Exact mode's canonical shard count (a power of two), or false; see `exact`. */
    exact: false | number;
  };
  /** Saving and resuming. */
  checkpoint: {
    /** Folder of checkpoints (null: <run dir>/checkpoints, or none outside a run). */
    dir: string | null;
    /** Save every N optimizer steps (null: only at epoch ends). */
    everySteps: number | null;
    /** Save at the end of every epoch (default true). */
    everyEpoch: boolean;
    /** Keep the newest K checkpoints (default 3). */
    keepLast: number;
    /** Also keep every checkpoint whose step is a multiple of this. */
    keepEvery: number | null;
    /**
     * Write checkpoints on a background thread (training goes on after the
     * snapshot); fit() returns, and a SIGTERM stop ends, only once the last one
     * is durable. false: each save blocks until it is on disk. Default true.
     */
    async: boolean;
    /** "auto" (default): continue from the latest good checkpoint when there is one; "never"; or a checkpoint path. */
    resume: string;
    /**
     * Let a resume change the data order (seed, data.shuffle, data.dropLast) or
     * data.globalBatchSize from what the checkpoint was trained with; otherwise
     * such a resume is refused (the launcher's --allow-config-change says the same). Default false.
     */
    allowConfigChange: boolean;
    /**
     * Also keep the checkpoint with the best value of this evaluation metric,
     * in <dir>/best (null: none). mode "max" for accuracies, "min" for losses.
     */
    best: { metric: string; mode: "min" | "max" } | null;
  };
  /** Evaluation during training. */
  eval: {
    /** Evaluate at the end of every epoch (a Trainer given evalData or evaluate; default true). */
    everyEpoch: boolean;
    /** Also evaluate every N optimizer steps (null: only at epoch ends). */
    everySteps: number | null;
    /** Samples per evaluation batch on each rank (null: the training micro-batch size). */
    batchSize: number | null;
  };
  /** DistributedDataParallel's settings. */
  ddp: {
    /** Gradient bucket size in MiB (default 25). */
    bucketCapMb: number;
    /** Allow parameters without a gradient in a step (default false). */
    findUnusedParameters: boolean;
    /**
     * Shard across ranks (ZeRO): "optimizer" keeps each rank's share of the optimizer state
     * (ZeRO-1), "gradients" its share of the gradients too (ZeRO-2); null (default): plain DDP.
     */
    shard: "optimizer" | "gradients" | null;
  };
  /** Print a progress line every N steps (rank 0; default 10). */
  logEvery: number;
  /**
   * Exact mode (docs/PYTORCH.md): the same weights, to the bit, on any number of ranks that
   * divides the shard count and in a single process. true: numerics.exact's shard count, else 8;
   * a number: that many canonical shards (a power of two). Default false.
   */
  exact: boolean | number;
};

/**
 * What a user writes for `resolveConfig` or `new Trainer({ config })`: any
 * subset of the sections and fields of {@linkcode TrainConfig}; the rest
 * take their defaults.
 *
 * @example
 * ```ts
 * import type { TrainConfigInput } from "dtrain";
 * const config: TrainConfigInput = {
 *   epochs: 3,
 *   data: { globalBatchSize: 128 },
 *   optim: { lr: 3e-4, groups: [{ maxDims: 1, weightDecay: 0 }] },
 *   schedule: { kind: "cosine", warmupSteps: 100 },
 * };
 * ```
 */
export type TrainConfigInput = {
  /** See {@linkcode TrainConfig.epochs}. */
  epochs?: number;
  /** See {@linkcode TrainConfig.maxSteps}. */
  maxSteps?: number | null;
  /** See {@linkcode TrainConfig.seed}. */
  seed?: number;
  /** See {@linkcode TrainConfig.data}. */
  data?: Partial<TrainConfig["data"]>;
  /** See {@linkcode TrainConfig.optim}. */
  optim?: Partial<Omit<TrainConfig["optim"], "groups">> & { groups?: Partial<ParamGroupRule>[] };
  /** See {@linkcode TrainConfig.schedule}. */
  schedule?: Partial<TrainConfig["schedule"]>;
  /** See {@linkcode TrainConfig.precision}. */
  precision?: Partial<TrainConfig["precision"]>;
  /** See {@linkcode TrainConfig.clipGradNorm}. */
  clipGradNorm?: number | null;
  /** See {@linkcode TrainConfig.numerics}. */
  numerics?: Partial<TrainConfig["numerics"]>;
  /** See {@linkcode TrainConfig.checkpoint}. */
  checkpoint?: Partial<TrainConfig["checkpoint"]>;
  /** See {@linkcode TrainConfig.eval}. */
  eval?: Partial<TrainConfig["eval"]>;
  /** See {@linkcode TrainConfig.ddp}. */
  ddp?: Partial<TrainConfig["ddp"]>;
  /** See {@linkcode TrainConfig.logEvery}. */
  logEvery?: number;
  /** See {@linkcode TrainConfig.exact}. */
  exact?: boolean | number;
};
