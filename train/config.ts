/**
 * The training configuration: one typed object in plain sections, every
 * field with a default and a one-line doc, validated with zod so that a bad
 * value is an error naming the field, the value and what is allowed. Every
 * section is strict: a misspelled key is an error, never silently ignored.
 */
import { z } from "zod";
import { lazySchema } from "../run_record/lazy_schema.ts";
import { describeConfigIssues } from "./config_errors.ts";
import type { TrainConfig, TrainConfigInput } from "./config_types.ts";

const positiveInt = lazySchema(() => z.number().int().positive());

function isRegExp(source: string): boolean {
  try {
    new RegExp(source);
    return true;
  } catch {
    return false;
  }
}

/** Schema of the training configuration (see TrainConfig for the docs). */
export const TrainConfigSchema = lazySchema(() =>
  z.strictObject({
    /** Passes over the training data. */
    epochs: positiveInt.default(1),
    /** Stop after this many optimizer steps in total (null: run every epoch). */
    maxSteps: positiveInt.nullable().default(null),
    /** Seed of parameter init (manualSeed), data order and dropout. */
    seed: z.number().int().min(0).default(0),
    data: z.strictObject({
      /** Samples per optimizer step over all ranks and micro-batches. */
      globalBatchSize: positiveInt.default(64),
      /** Micro-batches accumulated per optimizer step (noSync on all but the last). */
      gradAccumulation: positiveInt.default(1),
      /** Reshuffle every epoch (DistributedSampler, torch's order for the same seed). */
      shuffle: z.boolean().default(true),
      /** Drop the tail instead of padding by repeating the first indices. */
      dropLast: z.boolean().default(false),
      /** Batches prepared ahead in the background. */
      prefetch: z.number().int().min(0).default(2),
    }).prefault({}),
    optim: z.strictObject({
      /** "adamw", "sgd", "adam", "adadelta", "adagrad" or "rmsprop" (torch.optim's classes). */
      name: z.enum(["adamw", "sgd", "adam", "adadelta", "adagrad", "rmsprop"]).default("adamw"),
      /** Peak learning rate. */
      lr: z.number().positive().default(1e-3),
      /** Decoupled (AdamW) or L2 (SGD) weight decay. */
      weightDecay: z.number().min(0).default(1e-2),
      /** AdamW betas. */
      betas: z.tuple([z.number().min(0).lt(1), z.number().min(0).lt(1)]).default([0.9, 0.999]),
      /** AdamW epsilon. */
      eps: z.number().positive().default(1e-8),
      /** SGD and RMSprop momentum. */
      momentum: z.number().min(0).default(0),
      /** Adam's AMSGrad variant. */
      amsgrad: z.boolean().default(false),
      /** RMSprop smoothing constant. */
      alpha: z.number().min(0).default(0.99),
      /** RMSprop centered (normalised by the gradient's variance). */
      centered: z.boolean().default(false),
      /** Adadelta smoothing constant. */
      rho: z.number().min(0).max(1).default(0.9),
      /** Adagrad learning-rate decay. */
      lrDecay: z.number().min(0).default(0),
      /** SGD Nesterov momentum. */
      nesterov: z.boolean().default(false),
      /**
       * Parameter groups with their own weight decay or learning rate; a
       * parameter joins the first group it matches, the rest form a last group
       * with the settings above. nanoGPT's rule: [{ maxDims: 1, weightDecay: 0 }].
       */
      groups: z.array(z.strictObject({
        /** Parameters whose dotted name matches this regular expression (null: any name). */
        names: z.string().refine(isRegExp, "not a valid regular expression").nullable()
          .default(null),
        /** Parameters with at least this many dims (null: any). */
        minDims: z.number().int().min(0).nullable().default(null),
        /** Parameters with at most this many dims (1: biases and norm weights). */
        maxDims: z.number().int().min(0).nullable().default(null),
        /** The group's learning rate (null: optim.lr); the schedule scales it by optim.lr's factor. */
        lr: z.number().positive().nullable().default(null),
        /** The group's weight decay (null: optim.weightDecay). */
        weightDecay: z.number().min(0).nullable().default(null),
      })).default([]),
    }).prefault({}),
    schedule: z.strictObject({
      /** "constant", "cosine" (linear warmup then cosine decay) or "step". */
      kind: z.enum(["constant", "cosine", "step"]).default("constant"),
      /** Warmup steps of the cosine schedule. */
      warmupSteps: z.number().int().min(0).default(0),
      /** Final learning rate of the cosine schedule. */
      minLr: z.number().min(0).default(0),
      /** Steps between decays of the step schedule. */
      stepSize: positiveInt.default(1000),
      /** Decay factor of the step schedule. */
      gamma: z.number().positive().default(0.1),
    }).prefault({}),
    precision: z.strictObject({
      /** Low precision of matmul-class ops under autocast ("f32": autocast off). */
      autocast: z.enum(["f32", "bf16", "f16"]).default("f32"),
      /** Dynamic loss scaling (default: on for f16 only). */
      gradScaler: z.boolean().nullable().default(null),
    }).prefault({}),
    /** Clip the global gradient L2 norm to this value (null: no clipping). */
    clipGradNorm: z.number().positive().nullable().default(null),
    /**
     * The numerics policy (tensor/numerics_policy.ts) the Trainer sets for its
     * process: what of the arithmetic above it allows. Defaults allow all.
     */
    numerics: z.strictObject({
      /** "as-called": autocast in precision.autocast; "f32": every region in f32. */
      autocast: z.enum(["as-called", "f32"]).default("as-called"),
      /** false: no loss scaling, whatever precision.gradScaler says (said once in the log). */
      lossScaling: z.boolean().default(true),
      /** false: clipGradNorm is measured, not applied (said once in the log). */
      clipping: z.boolean().default(true),
      /** false: Dropout layers pass their input through (said once in the log). */
      dropout: z.boolean().default(true),
      /** Reductions in a fixed order; every kernel of this build has only these (false is refused). */
      deterministicReductions: z.boolean().default(true),
      /** TF32-like GPU products; no kernel of this build has them (true is refused). */
      tf32: z.boolean().default(false),
      /** Exact mode's canonical shard count (a power of two), or false; see `exact`. */
      exact: z.union([z.literal(false), positiveInt]).default(false),
    }).prefault({}),
    checkpoint: z.strictObject({
      /** Folder of checkpoints (null: <run dir>/checkpoints, or none outside a run). */
      dir: z.string().nullable().default(null),
      /** Save every N optimizer steps (null: only at epoch ends). */
      everySteps: positiveInt.nullable().default(null),
      /** Save at the end of every epoch. */
      everyEpoch: z.boolean().default(true),
      /** Keep the newest K checkpoints. */
      keepLast: positiveInt.default(3),
      /** Also keep every checkpoint whose step is a multiple of this. */
      keepEvery: positiveInt.nullable().default(null),
      /**
       * Write checkpoints on a background thread (training goes on after the
       * snapshot); fit() returns, and a SIGTERM stop ends, only once the last one
       * is durable. false: each save blocks until it is on disk.
       */
      async: z.boolean().default(true),
      /** "auto": continue from the latest good checkpoint when there is one; "never"; or a checkpoint path. */
      resume: z.string().default("auto"),
      /**
       * Let a resume change the data order (seed, data.shuffle, data.dropLast) or
       * data.globalBatchSize from what the checkpoint was trained with; otherwise
       * such a resume is refused (the launcher's --allow-config-change says the same).
       */
      allowConfigChange: z.boolean().default(false),
      /**
       * Also keep the checkpoint with the best value of this evaluation metric,
       * in <dir>/best (null: none). mode "max" for accuracies, "min" for losses.
       */
      best: z.strictObject({
        metric: z.string().min(1),
        mode: z.enum(["min", "max"]),
      }).nullable().default(null),
    }).prefault({}),
    eval: z.strictObject({
      /** Evaluate at the end of every epoch (a Trainer given evalData or evaluate). */
      everyEpoch: z.boolean().default(true),
      /** Also evaluate every N optimizer steps (null: only at epoch ends). */
      everySteps: positiveInt.nullable().default(null),
      /** Samples per evaluation batch on each rank (null: the training micro-batch size). */
      batchSize: positiveInt.nullable().default(null),
    }).prefault({}),
    ddp: z.strictObject({
      /** Gradient bucket size in MiB. */
      bucketCapMb: z.number().positive().default(25),
      /** Allow parameters without a gradient in a step. */
      findUnusedParameters: z.boolean().default(false),
      /**
       * Shard across ranks (ZeRO): "optimizer" keeps each rank's share of the optimizer state
       * (ZeRO-1), "gradients" its share of the gradients too (ZeRO-2); null: plain DDP.
       */
      shard: z.enum(["optimizer", "gradients"]).nullable().default(null),
    }).prefault({}),
    /** Print a progress line every N steps (rank 0). */
    logEvery: positiveInt.default(10),
    /**
     * Exact mode (docs/PYTORCH.md): the same weights, to the bit, on any number of ranks that
     * divides the shard count and in a single process. true: numerics.exact's shard count, else 8;
     * a number: that many canonical shards (a power of two).
     */
    exact: z.union([z.boolean(), positiveInt]).default(false),
  })
);

/** The validated configuration with every default filled in (written out in config_types.ts). */
export type { TrainConfig, TrainConfigInput } from "./config_types.ts";
/** Compile-time proof that config_types.ts says exactly what the schema parses and accepts. */
type SameType<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Holds<T extends true> = T;
export type ConfigTypesMatchSchema = [
  Holds<SameType<TrainConfig, z.output<typeof TrainConfigSchema>>>,
  Holds<SameType<TrainConfigInput, z.input<typeof TrainConfigSchema>>>,
];

/**
 * Validates a configuration and fills defaults. Errors name each bad field
 * by its full path with its value and what is allowed, and each unknown one
 * with the nearest valid field, e.g. `Invalid training config: optim.lr = -1:
 * Too small: expected number to be >0; optim.learningRate is not a field;
 * did you mean optim.lr?`.
 */
export function resolveConfig(input: unknown): TrainConfig {
  const r = TrainConfigSchema.safeParse(input ?? {});
  if (r.success) return r.data;
  const lines = describeConfigIssues(TrainConfigSchema, input, r.error.issues);
  throw new TypeError(`Invalid training config: ${lines.join("; ")}`);
}

/** Per-rank micro-batch size; throws unless the global batch splits evenly. */
export function microBatchSize(cfg: TrainConfig, worldSize: number): number {
  const { globalBatchSize: gb, gradAccumulation: k } = cfg.data;
  const per = gb / (worldSize * k);
  if (!Number.isInteger(per)) {
    throw new RangeError(
      `data.globalBatchSize ${gb} is not divisible by world size ${worldSize} × gradAccumulation ${k}`,
    );
  }
  return per;
}
