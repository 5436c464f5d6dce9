/**
 * The Trainer's evaluation on every rank: rank r of N takes samples r, r+N,
 * r+2N, … of the held-out data (no padding, so every sample counts once),
 * runs the user's evalStep on each batch under noGrad with the model in
 * eval mode (an async evalStep is awaited), and the batch metrics, each a
 * mean over its batch, are averaged over every rank's batches weighted by
 * batch size: the metrics of the whole held-out set, the same on every rank.
 * A pass longer than a couple of seconds prints progress on rank 0.
 */
import type { Module } from "../nn/module.ts";
import type { Tensor } from "../tensor/tensor.ts";
import { noGrad } from "../tensor/autograd.ts";
import { autocast } from "../amp/autocast.ts";
import { DataLoader, type Sampler } from "../data/dataloader.ts";
import type { Dataset } from "../data/dataset.ts";
import type { ProcessGroup } from "../distributed/process_group.ts";
import { allGatherJson } from "../distributed/gather_json.ts";
import { Progress } from "../distributed/control/progress.ts";

/** Metrics of one evaluation batch, each the mean over its samples (a loss, an accuracy). */
export type EvalStep<M extends Module> = (
  model: M,
  batch: Tensor[],
) => Record<string, number> | Promise<Record<string, number>>;

/** rank's share of 0..n-1 taken with stride `size`, unpadded (ranks may differ by one sample). */
class StridedSampler implements Sampler {
  constructor(readonly n: number, readonly size: number, readonly rank: number) {}
  setEpoch(): void {}
  indices(): Int32Array {
    const count = Math.max(0, Math.ceil((this.n - this.rank) / this.size));
    return Int32Array.from({ length: count }, (_, j) => this.rank + j * this.size);
  }
}

/** Evaluates a model over held-out data split across the ranks of `pg`. */
export class Evaluator<M extends Module> {
  readonly #loader: DataLoader;

  constructor(
    readonly data: Dataset,
    readonly step: EvalStep<M>,
    readonly pg: ProcessGroup,
    opts: { batchSize: number; precision: "f32" | "bf16" | "f16" },
  ) {
    this.#loader = new DataLoader(data, {
      batchSize: opts.batchSize,
      sampler: new StridedSampler(data.length, pg.size, pg.rank),
    });
    this.#precision = opts.precision;
  }
  readonly #precision: "f32" | "bf16" | "f16";

  /** Batches this rank evaluates per pass. */
  get batches(): number {
    return this.#loader.batchesFor((this.#loader.sampler as StridedSampler).indices().length);
  }

  /** One pass on every rank; resolves to the reduced metrics (every rank gets the same). */
  async run(model: M): Promise<Record<string, number>> {
    const progress = new Progress("evaluating", { total: this.batches, unit: "batches" });
    const sums = new Map<string, number>();
    let samples = 0, done = 0;
    const wasTraining = model.training;
    model.eval();
    try {
      await noGrad(async () => {
        for await (const { tensors } of this.#loader) {
          try {
            const n = tensors[0]?.shape[0] ?? 0;
            const m = await autocast(this.#precision, () => this.step(model, tensors));
            for (const [name, v] of Object.entries(m)) {
              if (typeof v !== "number") {
                throw new TypeError(`evalStep returned ${name} = ${String(v)}: expected a number`);
              }
              sums.set(name, (sums.get(name) ?? 0) + v * n);
            }
            samples += n;
          } finally {
            for (const t of tensors) t.dispose();
          }
          progress.update(++done);
        }
      });
    } finally {
      model.train(wasTraining);
    }
    progress.done();
    const mine = { names: [...sums.keys()].sort(), samples, sums: Object.fromEntries(sums) };
    const all = allGatherJson(this.pg, mine);
    const names = [...new Set(all.flatMap((a) => a.names))].sort();
    const total = all.reduce((a, x) => a + x.samples, 0);
    const out: Record<string, number> = {};
    for (const name of names) {
      const lacking = all.findIndex((a) => a.samples > 0 && !a.names.includes(name));
      if (lacking >= 0) {
        throw new Error(
          `evalStep returned "${name}" on some ranks but not on rank ${lacking}: every batch must return the same metrics`,
        );
      }
      // JSON carries a non-finite sum as null: the metric is then NaN.
      const sum = all.reduce((a, x) => a + (x.sums[name] ?? NaN), 0);
      out[name] = total > 0 ? sum / total : NaN;
    }
    return out;
  }
}
