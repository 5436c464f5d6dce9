/**
 * The strict schema of a checkpoint's state.json (what train/state.ts
 * writes), checked before anything of the checkpoint is loaded: every field
 * with its type and range, no unknown field, and the facts that tie fields
 * together (one RNG state per saving rank, a data position inside the data).
 * A state that fails is reported like a corrupt checkpoint.
 */
import { z } from "zod";
import { lazySchema } from "../run_record/lazy_schema.ts";
import { samplerSizes } from "../data/distributed_sampler.ts";
import { TrainConfigSchema } from "./config.ts";
import { describeConfigIssues } from "./config_errors.ts";
import type { TrainState } from "./state.ts";

const count = lazySchema(() => z.number().int().min(0).max(Number.MAX_SAFE_INTEGER));
const positive = lazySchema(() => z.number().int().min(1).max(Number.MAX_SAFE_INTEGER));
const decimal = lazySchema(() =>
  z.string().regex(/^[0-9]{1,20}$/, "expected a decimal integer string")
);

/** One rank's random state: TorchGeneratorState and the dropout offsets. */
const RankRngSchema = lazySchema(() =>
  z.strictObject({
    generator: z.strictObject({
      seed: decimal,
      words: z.array(z.number().int().min(0).max(0xffff_ffff)).length(624),
      index: z.number().int().min(0).max(624),
      nextDoubleNormal: z.number().nullable(),
    }),
    dropoutOffsets: z.array(decimal),
  })
);

/** Schema of state.json, field by field. */
export const TrainStateSchema = lazySchema(() =>
  z.strictObject({
    format: z.literal("dtrain.train-state/1"),
    epoch: count,
    step: count,
    data: z.strictObject({ epoch: count, epochWorldSize: positive, consumed: count }),
    schedule: z.strictObject({ step: count }),
    scaler: z.strictObject({
      scale: z.number().positive().finite(),
      growth_factor: z.number().positive().finite(),
      backoff_factor: z.number().positive().finite(),
      growth_interval: positive,
      _growth_tracker: count,
    }),
    rng: z.array(RankRngSchema).min(1),
    config: TrainConfigSchema,
    worldSize: positive,
    runId: z.string(),
    /** the best evaluation so far, when checkpoint.best is set (absent in older states) */
    best: z.strictObject({ metric: z.string(), value: z.number(), step: count }).nullable()
      .optional(),
  })
);

/** What a state must agree with besides its own schema. */
export interface StateContext {
  /** samples in the training data this run resumes on */
  datasetLength: number;
  /** the run's data.dropLast, which fixes an epoch's length */
  dropLast: boolean;
}

/**
 * Returns `value` as a TrainState, or throws an Error listing every problem
 * (field path, value, what is allowed), e.g. `step = -7: Too small: expected
 * number to be >=0` or `data.consumed = 1000000000: beyond the 1000 samples
 * of epoch 0 at world size 2`.
 */
export function checkTrainState(value: unknown, ctx: StateContext): TrainState {
  const r = TrainStateSchema.safeParse(value);
  if (!r.success) {
    const lines = describeConfigIssues(TrainStateSchema, value, r.error.issues, "(the state)");
    throw new Error(`not a valid dtrain training state: ${lines.join("; ")}`);
  }
  const s = r.data as TrainState;
  const problems: string[] = [];
  if (s.rng.length !== s.worldSize) {
    problems.push(
      `rng holds ${s.rng.length} rank states but worldSize is ${s.worldSize} (one per saving rank)`,
    );
  }
  if (s.data.epoch !== s.epoch) {
    problems.push(`data.epoch = ${s.data.epoch} differs from epoch = ${s.epoch}`);
  }
  const { totalSize } = samplerSizes(ctx.datasetLength, s.data.epochWorldSize, {
    dropLast: ctx.dropLast,
  });
  if (s.data.consumed > totalSize) {
    problems.push(
      `data.consumed = ${s.data.consumed}: beyond the ${totalSize} samples of an epoch of this ` +
        `data (${ctx.datasetLength} samples) at world size ${s.data.epochWorldSize}`,
    );
  }
  if (problems.length > 0) {
    throw new Error(`not a valid dtrain training state: ${problems.join("; ")}`);
  }
  return s;
}
