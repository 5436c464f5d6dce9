/**
 * The Trainer: owns the loop of a (distributed) training run. Each epoch it
 * calls setEpoch; each optimizer step it runs k micro-batches (forward under
 * autocast, scaled loss, backward; the last one's ddp.backward returns with
 * the gradients synced), unscales, clips to a global norm, steps the
 * optimizer unless gradients hold inf/NaN (sharded across the ranks under
 * ddp.shard, distributed/zero.ts), updates the scaler and the schedule,
 * logs, and checkpoints on rank 0 (a sharded state gathered there first). It
 * resumes from the latest good checkpoint, also on another world size, and
 * stops cleanly on SIGTERM/SIGINT after the current step with a checkpoint.
 */
import type { Module } from "../nn/module.ts";
import type { Tensor } from "../tensor/tensor.ts";
import { scope } from "../tensor/tensor.ts";
import { backward } from "../tensor/autograd.ts";
import { scale } from "../tensor/ops/elementwise.ts";
import { memoryStats } from "../tensor/allocator.ts";
import { backend } from "../tensor/backend.ts";
import { autocast } from "../amp/autocast.ts";
import { GradScaler } from "../amp/grad_scaler.ts";
import { AdamW } from "../optim/adamw.ts";
import { elementwiseOptimizer } from "../optim/by_name.ts";
import { SGD } from "../optim/sgd.ts";
import type { Optimizer, ParamGroupSpec } from "../optim/optimizer.ts";
import { clipGradNorm, gradNorm } from "../optim/clip.ts";
import {
  type NumericsPolicy,
  numericsPolicy,
  setNumericsPolicy,
} from "../tensor/numerics_policy.ts";
import { constantLr, LrScheduler, stepLr, warmupCosineLr } from "../optim/lr_schedule.ts";
import { DataLoader } from "../data/dataloader.ts";
import type { Dataset } from "../data/dataset.ts";
import { ResumableSampler } from "../data/resumable_sampler.ts";
import { currentProcessGroup, initProcessGroup } from "../distributed/init_process_group.ts";
import type { ProcessGroup } from "../distributed/process_group.ts";
import { DistributedDataParallel } from "../distributed/ddp.ts";
import { announceTrainedModel } from "../nn/trained_model_hook.ts";
import { checkExactRun, resolveExactShards } from "./exact_config.ts";
import { type OptimizerClass, ZeroRedundancyOptimizer } from "../distributed/zero.ts";
import { allGatherJson } from "../distributed/gather_json.ts";
import { phase } from "../distributed/control/phase.ts";
import { getRankSettings, getWorld } from "../distributed/control/env.ts";
import { publishFailure, reportResume } from "../distributed/control/rank_runtime.ts";
import { configChanges, describeChange, refuseUnintendedChanges } from "./resume_changes.ts";
import { manualSeed } from "../nn/init.ts";
import {
  CheckpointFolderBusy,
  CheckpointManager,
  type LoadedCheckpoint,
} from "./checkpoint/manager.ts";
import {
  microBatchSize,
  resolveConfig,
  type TrainConfig,
  type TrainConfigInput,
} from "./config.ts";
import { MetricsLogger } from "./metrics.ts";
import { paramGroupsFromConfig } from "./param_groups.ts";
import { type EvalStep, Evaluator } from "./evaluation.ts";
import { checkTrainState } from "./state_schema.ts";
import { appendDataOrder } from "../run_record/record.ts";
import { orderDigest } from "../run_record/data_order.ts";
import {
  type BestEvaluation,
  captureRng,
  modelFile,
  optimizerFile,
  restoreOptimizer,
  restoreRng,
  trainState,
} from "./state.ts";
import { dirname, join } from "node:path";
import { MANIFEST_FILE } from "./checkpoint/format.ts";
import { stateTensor } from "../nn/load.ts";
import { profiling, section } from "../profile/profile.ts";
import { printMemoryReport } from "../tensor/memory_kinds.ts";
import { onStopSignals } from "../os/stop_signals.ts";

/**
 * Called with every Trainer's resolved config, before the Trainer uses it: a
 * hook point for tools that run a user's script under other settings
 * (`dtrain check` stops after K steps, checkpoints every step, and sets the
 * plain numerics policy: no autocast, loss scaling, clipping or dropout). What a hook changes is what the
 * run records in config.json.
 */
export type TrainerConfigHook = (config: TrainConfig) => void;

const configHooks = new Set<TrainerConfigHook>();

/** Adds a hook to every Trainer's config; returns the function that removes it. */
export function addTrainerConfigHook(hook: TrainerConfigHook): () => void {
  configHooks.add(hook);
  return () => configHooks.delete(hook);
}

/** What the user supplies to a Trainer. */
export interface TrainerOptions<M extends Module> {
  /**
   * Builds the model. Called after manualSeed(config.seed), so every rank
   * builds the same initial weights (DDP broadcasts rank 0's anyway).
   */
  model: () => M;
  /** Training data: one sample per index; batches are lists of tensors. */
  data: Dataset;
  /** Mean loss of a micro-batch (the batch tensors as the dataset returns them). */
  loss: (model: M, batch: Tensor[]) => Tensor;
  /** Configuration (validated; defaults fill the rest). */
  config?: TrainConfigInput;
  /**
   * Held-out data, evaluated on every rank with `evalStep` (rank r of N takes
   * samples r, r+N, …; none is padded or left out) at each epoch end and
   * every eval.everySteps steps; the metrics are those of the whole set.
   */
  evalData?: Dataset;
  /**
   * Metrics of one evaluation batch, each the mean over the batch's samples
   * (e.g. `{ loss: crossEntropy(logits, y).item(), accuracy: correct / n }`);
   * may be async. Runs under noGrad and autocast with the model in eval
   * mode; the Trainer weights each batch by its size and averages over all
   * ranks, records the result in metrics.jsonl and prints it.
   */
  evalStep?: EvalStep<M>;
  /**
   * Called on rank 0 alone when the Trainer evaluates, with the plain model;
   * may be async. Its numbers join evalStep's metrics (and win on a name
   * clash). Prefer evalData + evalStep, which share the work among ranks.
   */
  evaluate?: (
    model: M,
    epoch: number,
  ) => Record<string, number> | Promise<Record<string, number>>;
  /** Tokens per sample, for tokens/s in the metrics (e.g. the block size of a language model). */
  tokensPerSample?: number;
  /** Process group (default: the open one, else initProcessGroup() from the launcher's environment). */
  processGroup?: ProcessGroup;
  /** Run directory for metrics, data order and checkpoints (default: the launcher's, or none). */
  runDir?: string | null;
}

/** What fit() returns. */
export interface FitResult {
  /** optimizer steps completed in total */
  steps: number;
  /** per-step training losses of this process's run (mean over ranks) */
  losses: number[];
  /** mean training loss of each completed epoch */
  epochLosses: number[];
  /** evaluation results in order, the same on every rank */
  evaluations: Record<string, number>[];
  /** the best evaluation (checkpoint.best), or null */
  best: BestEvaluation | null;
  /** the step this run resumed from, or null */
  resumedFrom: number | null;
  /** true when a SIGTERM/SIGINT stopped the run early (after a checkpoint) */
  preempted: boolean;
}

/**
 * One training run of a model over a dataset, on every rank of the job: the
 * loop a PyTorch script writes by hand (DDP, DistributedSampler, optimizer,
 * schedule, autocast and GradScaler, checkpoints, evaluation, resume), driven
 * by one TrainConfig.
 *
 * @example
 * ```ts
 * import { crossEntropy, Linear, TensorDataset, Trainer } from "dtrain";
 * const data = new TensorDataset(
 *   { data: new Float32Array(256 * 4).map((_, i) => i % 3), sampleShape: [4] },
 *   { data: new Int32Array(256).map((_, i) => i % 2), sampleShape: [] },
 * );
 * const trainer = new Trainer({
 *   model: () => new Linear(4, 2),
 *   data,
 *   loss: (model, [x, y]) => crossEntropy(model.forward(x!), y!),
 *   config: { epochs: 2, data: { globalBatchSize: 32 }, optim: { lr: 1e-2 } },
 * });
 * const result = await trainer.fit(); // result.epochLosses: the mean loss of each epoch
 * ```
 */
export class Trainer<M extends Module> {
  /** The resolved configuration (every default filled in). */
  readonly config: TrainConfig;
  /** The model, as the `model` option built it. */
  readonly model: M;
  /** The process group of the job (options.processGroup, or initProcessGroup()). */
  readonly pg: ProcessGroup;
  /** The DDP wrapper of the model, or null on a single rank. */
  readonly ddp: DistributedDataParallel<M> | null;
  /** The optimizer config.optim names (AdamW or SGD), with its parameter groups. */
  readonly optimizer: Optimizer<{ lr: number }>;
  /** The learning-rate schedule config.schedule describes. */
  readonly schedule: LrScheduler;
  /** The loss scaler (enabled for f16 autocast unless precision.gradScaler says otherwise). */
  readonly scaler: GradScaler;
  /** The numerics policy of the config's `numerics` section, set for the process. */
  readonly numerics: NumericsPolicy;
  /** The training data loader (micro-batches of this rank). */
  readonly loader: DataLoader;
  /** This rank's share of each epoch, resumable mid-epoch at another world size. */
  readonly sampler: ResumableSampler;
  /** Where checkpoints are saved and resumed from, or null when there is no checkpoint folder. */
  readonly checkpoints: CheckpointManager | null;
  /** where the best checkpoint is kept (checkpoint.best), or null */
  readonly bestCheckpoints: CheckpointManager | null;
  /** The run directory (options.runDir, or the launcher's), or null. */
  readonly runDir: string | null;
  readonly #opts: TrainerOptions<M>;
  readonly #evaluator: Evaluator<M> | null;
  #best: BestEvaluation | null = null;
  #lastEvalStep = -1;
  #epoch = 0;
  #step = 0;
  #consumed = 0;
  #stopRequested = false;

  /**
   * Builds model, optimizer, schedule, data loader and checkpoint manager from the options; throws
   * naming a bad config field or option.
   */
  constructor(opts: TrainerOptions<M>) {
    this.#opts = opts;
    this.config = resolveConfig(opts.config ?? {});
    const cfg = this.config;
    for (const hook of configHooks) hook(cfg);
    const exactShards = resolveExactShards(cfg); // before the policy: it carries the shard count
    // The config's numerics policy holds for the whole process (Dropout layers read it) and is
    // passed to autocast, the GradScaler and clipping explicitly.
    setNumericsPolicy(cfg.numerics, "the Trainer's config");
    this.numerics = numericsPolicy();
    const world = getWorld();
    this.pg = opts.processGroup ?? currentProcessGroup() ?? initProcessGroup();
    this.runDir = opts.runDir === undefined ? world.runDir : opts.runDir;
    if (exactShards !== null) checkExactRun(cfg, exactShards, opts.data.length, this.pg.size);
    manualSeed(cfg.seed);
    this.model = opts.model();
    announceTrainedModel(this.model);
    // Exact mode runs through DDP on one rank too: the shards and the fixed tree are its.
    this.ddp = this.pg.size > 1 || exactShards !== null
      ? new DistributedDataParallel(this.model, this.pg, {
        bucketCapMb: cfg.ddp.bucketCapMb,
        findUnusedParameters: cfg.ddp.findUnusedParameters,
        exact: exactShards ?? false,
      })
      : null;
    const groups = paramGroupsFromConfig(this.model, cfg.optim.groups).map((g) => ({
      params: g.params,
      ...(g.lr !== undefined ? { lr: g.lr } : {}),
      ...(g.weightDecay !== undefined ? { weightDecay: g.weightDecay } : {}),
    }));
    if (cfg.optim.name !== "adamw" && cfg.optim.name !== "sgd") {
      this.#refuseSharding(cfg.optim.name);
    }
    this.optimizer = cfg.optim.name === "adamw"
      ? this.#makeOptimizer(AdamW, groups, {
        lr: cfg.optim.lr,
        betas: [cfg.optim.betas[0], cfg.optim.betas[1]],
        eps: cfg.optim.eps,
        weightDecay: cfg.optim.weightDecay,
      })
      : cfg.optim.name === "sgd"
      ? this.#makeOptimizer(SGD, groups, {
        lr: cfg.optim.lr,
        momentum: cfg.optim.momentum,
        nesterov: cfg.optim.nesterov,
        weightDecay: cfg.optim.weightDecay,
      })
      : elementwiseOptimizer(cfg.optim.name, groups, cfg.optim);
    this.sampler = new ResumableSampler(opts.data.length, this.pg.size, this.pg.rank, {
      shuffle: cfg.data.shuffle,
      seed: cfg.seed,
      dropLast: cfg.data.dropLast,
    });
    this.loader = new DataLoader(opts.data, {
      batchSize: microBatchSize(cfg, this.pg.size),
      sampler: this.sampler,
      prefetch: cfg.data.prefetch,
    });
    // The schedule is written for optim.lr; groups with their own rate are scaled alike.
    this.schedule = new LrScheduler(this.optimizer, this.#lrFunction(), { baseLr: cfg.optim.lr });
    const useScaler = cfg.precision.gradScaler ?? cfg.precision.autocast === "f16";
    this.scaler = new GradScaler({ enabled: useScaler }, (flag) => {
      this.pg.allReduce({ ptr: flag.ptr, count: 1, dtype: "f32", device: flag.device }, "max");
    }, this.numerics);
    const ckDir = cfg.checkpoint.dir ?? (this.runDir ? join(this.runDir, "checkpoints") : null);
    const owner = world.runId || undefined; // the run named in the checkpoint folder's lock
    this.checkpoints = ckDir
      ? new CheckpointManager(ckDir, {
        rank: this.pg.rank,
        ...(owner ? { owner } : {}),
        keepLast: cfg.checkpoint.keepLast,
        ...(cfg.checkpoint.keepEvery ? { keepEvery: cfg.checkpoint.keepEvery } : {}),
        async: cfg.checkpoint.async,
      })
      : null;
    if ((opts.evalData === undefined) !== (opts.evalStep === undefined)) {
      throw new TypeError(
        `Trainer: evalData and evalStep go together (got only ${
          opts.evalData ? "evalData" : "evalStep"
        })`,
      );
    }
    this.#evaluator = opts.evalData && opts.evalStep
      ? new Evaluator(opts.evalData, opts.evalStep, this.pg, {
        batchSize: cfg.eval.batchSize ?? microBatchSize(cfg, this.pg.size),
        precision: cfg.precision.autocast,
      })
      : null;
    if (cfg.checkpoint.best && !this.#evaluator && !opts.evaluate) {
      throw new TypeError(
        `Trainer: checkpoint.best keeps the best "${cfg.checkpoint.best.metric}", but nothing is ` +
          "evaluated: give evalData and evalStep (or evaluate)",
      );
    }
    this.bestCheckpoints = ckDir && cfg.checkpoint.best
      ? new CheckpointManager(join(ckDir, "best"), {
        rank: this.pg.rank,
        keepLast: 1,
        ...(owner ? { owner } : {}),
      })
      : null;
  }

  /** The configured optimizer, sharded across the ranks when ddp.shard asks for it (ZeRO). */
  #makeOptimizer<H extends { lr: number }>(
    cls: OptimizerClass<H>,
    groups: ParamGroupSpec<H>[],
    hyper: Partial<H>,
  ): Optimizer<H> {
    const shard = this.config.ddp.shard;
    if (shard === null || this.ddp === null) return new cls(groups, hyper);
    return new ZeroRedundancyOptimizer<H>(groups, {
      ...hyper,
      optimizerClass: cls,
      ddp: this.ddp as DistributedDataParallel<Module>,
      shard,
    });
  }

  /** ZeRO shards AdamW's and SGD's state only: another optimizer with ddp.shard is refused. */
  #refuseSharding(name: string): void {
    if (this.config.ddp.shard === null || this.ddp === null) return;
    throw new TypeError(
      `ddp.shard "${this.config.ddp.shard}" shards AdamW and SGD state; optim.name "${name}" ` +
        `has no sharded form yet: use adamw or sgd, or ddp.shard: null`,
    );
  }

  /** Optimizer steps in one epoch at this world size. */
  get stepsPerEpoch(): number {
    const perRank = this.sampler.inner.numSamples;
    const micro = this.loader.batchesFor(perRank);
    return Math.ceil(micro / this.config.data.gradAccumulation);
  }

  /** Total optimizer steps of the run. */
  get totalSteps(): number {
    const all = this.stepsPerEpoch * this.config.epochs;
    return this.config.maxSteps ? Math.min(this.config.maxSteps, all) : all;
  }

  #lrFunction() {
    const { schedule: s, optim } = this.config;
    if (s.kind === "constant") return constantLr(optim.lr);
    if (s.kind === "step") return stepLr({ lr: optim.lr, stepSize: s.stepSize, gamma: s.gamma });
    return warmupCosineLr({
      maxLr: optim.lr,
      minLr: s.minLr,
      warmupSteps: s.warmupSteps,
      totalSteps: Math.max(this.totalSteps, s.warmupSteps + 1),
    });
  }

  /** Runs the training; every rank calls it. */
  async fit(): Promise<FitResult> {
    // Every stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT, …) stops after the current step.
    const stopListening = onStopSignals(() => (this.#stopRequested = true));
    const log = new MetricsLogger(this.runDir, {
      logEvery: this.config.logEvery,
      enabled: this.pg.rank === 0,
      totalSteps: this.totalSteps,
    });
    try {
      return await this.#fit(log);
    } catch (e) {
      // First tell the launcher why this rank fails, then close the group: peers blocked in a
      // collective with this rank fail at once, and their errors read as consequences of this one.
      await publishFailure(e);
      this.pg.close();
      throw e;
    } finally {
      stopListening();
      log.close();
    }
  }

  async #fit(log: MetricsLogger): Promise<FitResult> {
    const cfg = this.config;
    const result: FitResult = {
      steps: 0,
      losses: [],
      epochLosses: [],
      evaluations: [],
      best: null,
      resumedFrom: null,
      preempted: false,
    };
    this.#claimCheckpointFolders();
    result.resumedFrom = this.#resume(log);
    log.begin({
      config: {
        config: cfg,
        seed: cfg.seed,
        worldSize: this.pg.size,
        device: backend().kind,
        processGroup: this.pg.backend,
        numerics: this.numerics,
      },
      step: this.#step,
    });
    const k = cfg.data.gradAccumulation;
    const params = this.model.parameters();
    const tokens = this.#opts.tokensPerSample ?? null;
    for (let epoch = this.#epoch; epoch < cfg.epochs; epoch++) {
      if (this.#step >= this.totalSteps) break;
      this.loader.setEpoch(epoch);
      this.#epoch = epoch;
      this.#recordDataOrder(epoch);
      const epochStart = performance.now();
      let epochLossSum = 0, epochSteps = 0;
      let micro: Tensor[][] = [];
      let waitMs = 0;
      let stepStart = performance.now();
      let exhausted = false;
      const iterator = this.loader[Symbol.asyncIterator]();
      for (;;) {
        phase("data", { frequent: true });
        const next = await iterator.next();
        if (next.done) exhausted = true;
        else {
          micro.push(next.value.tensors);
          waitMs += next.value.waitMs;
          if (micro.length < k) continue;
        }
        if (micro.length === 0) break;
        // ---- one optimizer step over `micro` ----------------------------------
        const stepLoss = this.#forwardBackward(micro);
        const samples = micro.reduce((a, b) => a + b[0]!.shape[0]!, 0);
        for (const b of micro) for (const t of b) t.dispose();
        micro = [];
        const lr = this.schedule.lr; // the rate this step uses (before the schedule moves on)
        const norm = this.#clipAndStep(params);
        this.#step++;
        this.#consumed += samples * this.pg.size;
        // Every rank's loss, stop request and step time in one collective (on a GPU, one host
        // wait): the mean loss sums them in rank order, so every backend gives the same bits.
        const { loss, stopNow, byRank } = this.#gatherStepFacts(
          stepLoss,
          performance.now() - stepStart,
        );
        const stepMs = performance.now() - stepStart;
        const mem = memoryStats();
        log.log({
          step: this.#step,
          epoch,
          attempt: Number(Deno.env.get("DTRAIN_RESTART_COUNT") ?? 0),
          loss,
          lr,
          gradNorm: norm,
          lossScale: this.scaler.opts.enabled ? this.scaler.scaleValue : null,
          skipped: this.scaler.skippedSteps,
          samplesPerS: (samples * this.pg.size) / (stepMs / 1000),
          tokensPerS: tokens ? (samples * this.pg.size * tokens) / (stepMs / 1000) : null,
          stepMs,
          dataWaitMs: waitMs,
          memBytes: mem.liveBytes + mem.cachedBytes,
          stepMsByRank: byRank,
          samples: samples * this.pg.size,
        });
        result.losses.push(loss);
        epochLossSum += loss;
        epochSteps++;
        waitMs = 0;
        const evalEvery = cfg.eval.everySteps;
        if (!stopNow && evalEvery && this.#step % evalEvery === 0) {
          await this.#evaluate(epoch, log, result);
        }
        const every = cfg.checkpoint.everySteps;
        if (stopNow || (every && this.#step % every === 0)) this.#save();
        if (stopNow) {
          await this.checkpoints?.wait(); // preempted: the grace period is for making it durable
          log.print(`stopping at step ${this.#step} on request (SIGTERM/SIGINT); checkpoint saved`);
          await iterator.return(undefined);
          result.preempted = true;
          result.steps = this.#step;
          return result;
        }
        if (this.#step >= this.totalSteps) {
          await iterator.return(undefined);
          break;
        }
        stepStart = performance.now();
      }
      // ---- epoch end (or the last step of the run) --------------------------------
      const epochLoss = epochSteps ? epochLossSum / epochSteps : NaN;
      result.epochLosses.push(epochLoss);
      if (exhausted) {
        this.#consumed = 0;
        this.#epoch = epoch + 1;
      }
      log.print(
        `epoch ${epoch}: mean loss ${epochLoss.toFixed(4)}, time ${
          ((performance.now() - epochStart) / 1000).toFixed(3)
        }s`,
      );
      if (cfg.eval.everyEpoch) await this.#evaluate(epoch, log, result);
      const last = this.#step >= this.totalSteps;
      if ((cfg.checkpoint.everyEpoch && exhausted) || last) this.#save();
      this.pg.barrier("epoch-end");
    }
    await this.checkpoints?.wait(); // fit() returns with the last checkpoint durable
    if (!profiling) printMemoryReport(); // every rank's (DTRAIN_PROFILE=1 prints it at exit)
    result.steps = this.#step;
    result.best = this.#best;
    return result;
  }

  /**
   * One evaluation on every rank (evalData/evalStep shared among ranks, and
   * the rank-0 evaluate), recorded in metrics.jsonl; keeps the best
   * checkpoint when checkpoint.best's metric improved. Once per step.
   */
  async #evaluate(epoch: number, log: MetricsLogger, result: FitResult): Promise<void> {
    if ((!this.#evaluator && !this.#opts.evaluate) || this.#lastEvalStep === this.#step) return;
    this.#lastEvalStep = this.#step;
    phase("evaluate");
    const metrics = this.#evaluator ? await this.#evaluator.run(this.model) : {};
    if (this.#opts.evaluate) {
      const own = this.pg.rank === 0 ? await this.#opts.evaluate(this.model, epoch) : null;
      Object.assign(metrics, allGatherJson(this.pg, own)[0] ?? {});
    }
    result.evaluations.push(metrics);
    log.logEval({
      step: this.#step,
      epoch,
      attempt: Number(Deno.env.get("DTRAIN_RESTART_COUNT") ?? 0),
      metrics,
    });
    const want = this.config.checkpoint.best;
    if (!want) return;
    const value = metrics[want.metric];
    if (value === undefined) {
      throw new Error(
        `checkpoint.best.metric "${want.metric}" is not among the evaluation's metrics ` +
          `(${Object.keys(metrics).join(", ") || "none"})`,
      );
    }
    const prev = this.#best?.value;
    const better = Number.isFinite(value) &&
      (prev === undefined || (want.mode === "max" ? value > prev : value < prev));
    if (!better) return;
    this.#best = { metric: want.metric, value, step: this.#step };
    if (this.bestCheckpoints) {
      this.#save(this.bestCheckpoints);
      log.print(
        `best ${want.metric} so far (${value.toFixed(4)}): saved in ${this.bestCheckpoints.dir}`,
      );
    }
  }

  readonly #stepFacts = new Float64Array(3);

  /**
   * One allGather of (loss, stop requested, step time) per rank: the mean loss over
   * ranks (summed in rank order), whether any rank was asked to stop, and every
   * rank's step time in ms up to this collective, indexed by rank.
   */
  #gatherStepFacts(
    stepLoss: number,
    stepMs: number,
  ): { loss: number; stopNow: boolean; byRank: number[] } {
    const n = this.pg.size;
    const mine = this.#stepFacts;
    mine[0] = stepLoss;
    mine[1] = this.#stopRequested ? 1 : 0;
    mine[2] = stepMs;
    const all = n === 1 ? mine : new Float64Array(3 * n);
    if (n > 1) this.pg.allGather(all, mine);
    let sum = 0, stop = false;
    const byRank: number[] = [];
    for (let r = 0; r < n; r++) {
      sum += all[3 * r]!;
      stop ||= all[3 * r + 1]! > 0;
      byRank.push(all[3 * r + 2]!);
    }
    return { loss: sum / n, stopNow: stop, byRank };
  }

  /**
   * Forward and backward of k micro-batches; returns the step's loss (mean
   * of micro-batch losses). Under DDP the last backward starts the gradient
   * sync (each bucket's allReduce as its gradients complete); the ones
   * before accumulate locally.
   */
  #forwardBackward(micro: Tensor[][]): number {
    const k = micro.length;
    const low = this.config.precision.autocast;
    const ddp = this.ddp;
    let total = 0;
    micro.forEach((batch, i) =>
      scope(() => {
        phase("forward", { frequent: true });
        const loss = section("forward", () =>
          autocast(low, () => this.#opts.loss(this.model, batch), this.numerics));
        total += loss.item() / k;
        phase("backward", { frequent: true });
        const scaled = this.scaler.scale(k > 1 ? scale(loss, 1 / k) : loss);
        if (!ddp) {
          backward(scaled);
        } else if (i === k - 1) {
          ddp.backward(scaled);
        } else {ddp.noSync(() =>
            ddp.backward(scaled)
          );}
      })
    );
    return total;
  }

  /** Unscale, clip (or measure) the global norm, step unless inf/NaN, update scaler and schedule. */
  #clipAndStep(params: Tensor[]): number | null {
    phase("optimizer", { frequent: true });
    this.scaler.unscale(this.optimizer);
    const maxNorm = this.config.clipGradNorm;
    const opt = this.optimizer;
    // A sharded optimizer takes the global norm across the ranks' shares (the same bits).
    const norm = opt instanceof ZeroRedundancyOptimizer
      ? maxNorm !== null ? opt.clipGradNorm(maxNorm, { numerics: this.numerics }) : opt.gradNorm()
      : maxNorm !== null
      ? clipGradNorm(params, maxNorm, { numerics: this.numerics })
      : gradNorm(params);
    this.scaler.step(this.optimizer);
    this.scaler.update();
    this.schedule.step();
    this.optimizer.zeroGrad();
    return Number.isFinite(norm) ? norm : null;
  }

  /** Rank 0 saves a checkpoint (every rank contributes its RNG state). */
  #save(checkpoints = this.checkpoints): void {
    if (!checkpoints) return;
    phase("checkpoint save");
    this.optimizer.consolidateStateDict(0); // a sharded optimizer's state, whole on rank 0
    const rng = allGatherJson(this.pg, captureRng(this.model));
    if (this.pg.rank === 0) {
      const state = trainState({
        epoch: this.#epoch,
        step: this.#step,
        data: {
          epoch: this.#epoch,
          epochWorldSize: this.sampler.epochWorldSize,
          consumed: this.#consumed,
        },
        schedule: this.schedule,
        scaler: this.scaler,
        rng,
        config: this.config,
        worldSize: this.pg.size,
        runId: getWorld().runId,
        ...(this.config.checkpoint.best ? { best: this.#best } : {}),
      });
      checkpoints.save({
        step: this.#step,
        files: [modelFile(this.model), optimizerFile(this.optimizer)],
        state: state as unknown as Record<string, unknown>,
      });
    }
    this.pg.barrier("checkpoint");
  }

  /**
   * Before anything is loaded or saved: rank 0 takes the lock of this run's checkpoint folders
   * (refused, naming the holder, when another live run writes them); the other ranks check that
   * no live run but their own holds them. Two live runs never share a folder.
   */
  #claimCheckpointFolders(): void {
    const managers = [this.checkpoints, this.bestCheckpoints].filter((m) => m !== null);
    if (this.pg.rank === 0) {
      for (const m of managers) m.claim("resume from it or write its checkpoints there");
    }
    // Rank 0 names itself in a lock file only after taking the lock: the others read it after.
    if (managers.length > 0 && this.pg.size > 1) this.pg.barrier("checkpoint folders claimed");
    for (const m of managers) {
      if (this.pg.rank === 0) continue;
      const writer = m.liveWriter();
      if (writer && writer.owner !== m.owner) {
        throw new CheckpointFolderBusy(
          m.dir,
          writer,
          "resume from it or write its checkpoints there",
        );
      }
    }
  }

  /** Loads the configured checkpoint; returns its step or null for a fresh start. */
  #resume(log: MetricsLogger): number | null {
    const mode = this.config.checkpoint.resume;
    if (mode === "never") return null;
    // Checked before anything is loaded; under "auto" a bad state counts as a corrupt checkpoint.
    const check = (loaded: LoadedCheckpoint) => {
      const st = checkTrainState(loaded.state, {
        datasetLength: this.#opts.data.length,
        dropLast: this.config.data.dropLast,
      });
      for (const name of ["model", "optimizer"]) {
        if (!loaded.files.has(name)) {
          throw new Error(`a training checkpoint needs a ${name} file, and it has none`);
        }
      }
      return st;
    };
    let loaded: LoadedCheckpoint;
    if (mode === "auto") {
      // This run's own checkpoints first (a restart's), else those of the run named by --resume.
      const latest = this.checkpoints?.loadLatest({ accept: check }) ??
        this.#loadResumeSource(check);
      if (!latest) return null;
      loaded = latest;
      for (const s of loaded.skipped) log.print(`skipped checkpoint ${s.dir}: ${s.reason}`);
    } else {
      loaded = (this.checkpoints ?? new CheckpointManager(mode, { rank: this.pg.rank })).load(mode);
      try {
        check(loaded);
      } catch (e) {
        throw new Error(`Cannot resume from ${loaded.dir}: ${(e as Error).message}`, { cause: e });
      }
    }
    phase("checkpoint load");
    const st = check(loaded);
    // What the checkpoint was trained with against this run: the data order and the global batch
    // only on purpose; any other change is said once (the log, and run.json's attempt).
    const changes = configChanges(
      st.config as unknown as Record<string, unknown>,
      this.config as unknown as Record<string, unknown>,
      st.worldSize,
      this.pg.size,
    );
    refuseUnintendedChanges(
      changes,
      this.config.checkpoint.allowConfigChange || getRankSettings().allowConfigChange,
      loaded.dir,
    );
    if (changes.length > 0) {
      log.print(
        `resuming with ${changes.length} change(s) to the training config the checkpoint was ` +
          `trained with: ${changes.map(describeChange).join("; ")}`,
      );
    }
    reportResume({
      checkpoint: loaded.dir,
      step: st.step,
      savedBy: st.runId,
      configChanges: changes.map(describeChange),
    });
    const model = loaded.files.get("model")!;
    const opt = loaded.files.get("optimizer")!;
    this.model.loadStateDict(new Map([...model.tensors].map(([k, t]) => [k, stateTensor(t)])));
    restoreOptimizer(this.optimizer, opt);
    this.schedule.loadStateDict(st.schedule);
    this.scaler.loadStateDict(st.scaler);
    restoreRng(this.model, st.rng[this.pg.rank] ?? st.rng[0]!);
    // A best value of another metric (the config changed) does not count.
    this.#best = st.best && st.best.metric === this.config.checkpoint.best?.metric ? st.best : null;
    this.#step = st.step;
    this.#epoch = st.data.epoch;
    this.#consumed = st.data.consumed;
    if (st.data.consumed > 0) this.sampler.resume(st.data);
    else this.sampler.setEpoch(st.data.epoch);
    const how = st.worldSize === this.pg.size
      ? ""
      : ` (saved by ${st.worldSize} ranks, continuing on ${this.pg.size})`;
    log.print(
      `resumed from ${loaded.dir}: epoch ${st.data.epoch}, step ${st.step}${how}; ${
        whoseState(st.runId, getWorld().runId)
      }`,
    );
    return st.step;
  }

  /**
   * The latest good checkpoint of the launcher's --resume folder
   * (DTRAIN_RESUME): a checkpoint itself, a run directory (its checkpoints/)
   * or a folder of checkpoints; null without --resume. A folder that holds
   * none is an error, not a fresh start.
   */
  #loadResumeSource(accept: (loaded: LoadedCheckpoint) => void): LoadedCheckpoint | null {
    const from = getRankSettings().resume;
    if (from === null) return null;
    const exists = (p: string) => {
      try {
        Deno.statSync(p);
        return true;
      } catch {
        return false;
      }
    };
    if (exists(join(from, MANIFEST_FILE))) {
      refuseLiveSource(new CheckpointManager(dirname(from), { rank: this.pg.rank }));
      const loaded = new CheckpointManager(dirname(from), { rank: this.pg.rank }).load(from);
      accept(loaded);
      return loaded;
    }
    const dir = exists(join(from, "checkpoints")) ? join(from, "checkpoints") : from;
    const source = new CheckpointManager(dir, { rank: this.pg.rank });
    refuseLiveSource(source);
    const loaded = source.loadLatest({ accept });
    if (!loaded) {
      throw new Error(
        `Cannot resume from ${from} (--resume): it holds no checkpoint (looked in ${dir})`,
      );
    }
    return loaded;
  }

  /** This epoch's data-order digest from every rank, recorded by rank 0. */
  #recordDataOrder(epoch: number): void {
    const digests = allGatherJson(
      this.pg,
      orderDigest(epoch, this.pg.rank, this.sampler.peekIndices()),
    );
    if (this.pg.rank === 0 && this.runDir) {
      for (const d of digests) appendDataOrder(this.runDir, d);
    }
  }
}

/** --resume names a folder that another live run writes: its checkpoints may rotate away mid-read. */
function refuseLiveSource(source: CheckpointManager): void {
  const writer = source.liveWriter();
  if (writer && writer.owner !== (getWorld().runId || `pid ${Deno.pid}`)) {
    throw new CheckpointFolderBusy(source.dir, writer, "resume from it (--resume)");
  }
}

/**
 * Whose training state a resume adopts, for the log: this run's own (a
 * restart's), or another run's — which the folder lock has shown not live.
 */
function whoseState(savedBy: string, me: string): string {
  if (savedBy !== "" && savedBy === me) return `this run's own state (run ${me})`;
  if (savedBy === "") return "the state of a run that recorded no run id (outside the launcher)";
  return `adopting the state of run ${savedBy}, which is not live (this is run ${
    me || "without an id"
  })`;
}
