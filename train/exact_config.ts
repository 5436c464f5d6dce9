/**
 * The Trainer's exact mode (distributed/exact.ts): the shard count its config
 * asks for (`exact`, or `numerics.exact`), and the refusals of what exact mode
 * cannot make the same at every world size, each naming the field to change.
 */
import type { TrainConfig } from "./config_types.ts";
import { checkShardCount, DEFAULT_EXACT_SHARDS } from "../distributed/exact.ts";

/**
 * The canonical shard count of a config, or null when exact mode is off;
 * writes it into `cfg.numerics.exact` so the policy, config.json and run.json
 * all say it. Throws when `exact` and `numerics.exact` name different counts.
 */
export function resolveExactShards(cfg: TrainConfig): number | null {
  const fromPolicy = cfg.numerics.exact;
  let shards: number | null;
  if (cfg.exact === false) shards = fromPolicy === false ? null : fromPolicy;
  else if (cfg.exact === true) shards = fromPolicy === false ? DEFAULT_EXACT_SHARDS : fromPolicy;
  else {
    if (fromPolicy !== false && fromPolicy !== cfg.exact) {
      throw new RangeError(
        `Invalid training config: exact = ${cfg.exact} and numerics.exact = ${fromPolicy} ` +
          "name different shard counts (give one)",
      );
    }
    shards = cfg.exact;
  }
  if (shards !== null) checkShardCount(shards, "Invalid training config: exact");
  cfg.numerics.exact = shards ?? false;
  return shards;
}

/**
 * Refuses a run exact mode cannot make the same at every world size: ZeRO,
 * a world size that does not divide the shards, micro-batches that do not
 * split into whole shards, and a dataset whose last batch would be padded or
 * cut differently at another world size.
 */
export function checkExactRun(
  cfg: TrainConfig,
  shards: number,
  datasetLength: number,
  worldSize: number,
): void {
  const refuse = (why: string) => {
    throw new RangeError(`exact mode (${shards} canonical shards): ${why}`);
  };
  if (cfg.ddp.shard !== null) {
    refuse(
      `ddp.shard = "${cfg.ddp.shard}" (ZeRO) is refused: a reduce-scatter's sums depend on the ` +
        "world size; train exact runs with plain DDP (ddp.shard: null)",
    );
  }
  if (worldSize > shards || shards % worldSize !== 0) {
    refuse(
      `world size ${worldSize} does not divide the shard count (run on a power of two of ranks ` +
        `up to ${shards}, or raise exact)`,
    );
  }
  const { globalBatchSize: gb, gradAccumulation: k } = cfg.data;
  if (gb % (k * shards) !== 0) {
    refuse(
      `data.globalBatchSize ${gb} / data.gradAccumulation ${k} is not a multiple of ${shards}: ` +
        "every micro-batch must split into whole canonical shards",
    );
  }
  if (datasetLength % shards !== 0) {
    refuse(
      `the dataset's ${datasetLength} samples are not a multiple of ${shards}: the last batch ` +
        "would be padded (or cut, with data.dropLast) by an amount that depends on the world " +
        `size; use a length that is a multiple of ${shards}`,
    );
  }
}
