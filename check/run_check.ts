/**
 * The order of `dtrain check`: which runs of the user's script each stage
 * needs, with which probe settings, run in two waves (the sampler run and
 * the three gradient runs at once, then the two resume runs that start from
 * the N-rank run's checkpoint), and the rows each stage's analysis returns.
 */
import { readRankEvents, stepsOf } from "./events.ts";
import { CHECK_ENV } from "./env.ts";
import {
  describeExit,
  type RunContext,
  runFolders,
  type RunResult,
  type RunSpec,
  runStage,
} from "./runs.ts";
import { checkSampler } from "./sampler_stage.ts";
import { checkGradients, combineSteps, type RunSteps } from "./gradient_stage.ts";
import { checkSaved, planResume, savedCheckpoints, stageResume } from "./state_stage.ts";
import { checkResumeInOneProcess, checkResumeOnRanks } from "./resume_check.ts";
import { ENV as WORLD_ENV } from "../distributed/control/env.ts";
import { fail, type Row } from "./verdict.ts";

/** What one `dtrain check` compares. */
export interface CheckOptions extends RunContext {
  /** ranks of the distributed runs (N >= 2) */
  nproc: number;
  /** optimizer steps K compared in stages 2 and 3 (K >= 2) */
  steps: number;
  /** receives progress lines */
  log: (line: string) => void;
}

/** The probe settings of a K-step run in plain arithmetic; `stopAfter` counts this process's steps. */
function stepEnv(
  stage: string,
  k: number,
  stopAfter: number,
  checkpoints: boolean,
): Record<string, string> {
  return {
    [CHECK_ENV.STAGE]: stage,
    [CHECK_ENV.PLAIN]: "1",
    [CHECK_ENV.MAX_STEPS]: String(k),
    [CHECK_ENV.STOP_AFTER]: String(stopAfter),
    ...(checkpoints ? { [CHECK_ENV.CKPT_EVERY]: "1" } : {}),
  };
}

/** The runs of stages 1 and 2; the N-rank gradient run doubles as stage 3's original (it checkpoints every step). */
function firstWave(o: CheckOptions): Record<"sampler" | "single" | "world1" | "worldN", RunSpec> {
  const n = o.nproc, k = o.steps;
  return {
    sampler: {
      name: "sampler",
      title: `sampler stage, launcher --nproc ${n}`,
      nproc: n,
      env: { [CHECK_ENV.STAGE]: "sampler" },
    },
    single: {
      name: "single",
      title: "single process",
      nproc: null,
      env: stepEnv("gradients", k, k, false),
    },
    world1: {
      name: "world-1",
      title: "launcher --nproc 1",
      nproc: 1,
      env: stepEnv("gradients", k, k, false),
    },
    worldN: {
      name: `world-${n}`,
      title: `launcher --nproc ${n}`,
      nproc: n,
      env: stepEnv("gradients", k, k, true),
    },
  };
}

function stepsOfRun(r: RunResult): RunSteps {
  if (r.code !== 0) return { failed: describeExit(r) };
  return {
    ranks: new Map(
      [...readRankEvents(r.probeDir)].map(([rank, events]) => [rank, stepsOf(events)]),
    ),
  };
}

function labelled(o: CheckOptions, spec: RunSpec): Promise<RunResult> {
  o.log(`  running ${spec.name}: ${spec.title}`);
  return runStage(spec, o);
}

/** Runs every stage on the user's script and returns the verdict rows in stage order. */
export async function runCheck(o: CheckOptions): Promise<Row[]> {
  const plan = firstWave(o);
  const [sampler, single, world1, worldN] = await Promise.all(
    [plan.sampler, plan.single, plan.world1, plan.worldN].map((s) => labelled(o, s)),
  ) as [RunResult, RunResult, RunResult, RunResult];
  const rows: Row[] = sampler.code === 0
    ? checkSampler(readRankEvents(sampler.probeDir), o.nproc)
    : [fail("sampler", "sampler run", "did not finish", describeExit(sampler))];
  const worldNSteps = stepsOfRun(worldN);
  const gradients = checkGradients(
    { single: stepsOfRun(single), world1: stepsOfRun(world1), worldN: worldNSteps },
    { nproc: o.nproc, steps: o.steps },
  );
  rows.push(...gradients.rows);
  rows.push(...await stateStage(o, worldN, worldNSteps, gradients.distributedMatchesSingle));
  return rows;
}

async function stateStage(
  o: CheckOptions,
  worldN: RunResult,
  worldNSteps: RunSteps,
  nMatchesOne: boolean,
): Promise<Row[]> {
  const k = o.steps, n = o.nproc;
  if ("failed" in worldNSteps) {
    return [fail("state", "checkpoint to resume from", "no run", worldNSteps.failed)];
  }
  const rank0 = readRankEvents(worldN.probeDir).get(0) ?? [];
  const plan = planResume(savedCheckpoints(rank0), k, worldN.runDir);
  if ("outcome" in plan) return [plan];
  const j = plan.checkpoint.step;
  const rows = checkSaved(plan, worldNSteps.ranks.get(0)?.[j]?.params ?? null);
  const resumeN: RunSpec = {
    name: `resume-${n}`,
    title: `launcher --nproc ${n}, resumed from step ${j}`,
    nproc: n,
    env: stepEnv("resume", k, k - j, true),
  };
  const resume1: RunSpec = {
    name: "resume-single",
    title: `single process, resumed from step ${j}`,
    nproc: null,
    env: {
      ...stepEnv("resume", k, k - j, true),
      [WORLD_ENV.RUN_DIR]: runFolders(o.outDir, "resume-single").runDir,
    },
  };
  for (const spec of [resumeN, resume1]) stageResume(plan, runFolders(o.outDir, spec.name).runDir);
  const [rN, r1] = await Promise.all([labelled(o, resumeN), labelled(o, resume1)]) as [
    RunResult,
    RunResult,
  ];
  const original = combineSteps(worldNSteps, n, k);
  rows.push(
    checkResumeOnRanks({ original, resumed: stepsOfRun(rN), world: n, k, plan }),
    ...checkResumeInOneProcess(
      { original, resumed: stepsOfRun(r1), world: 1, k, plan },
      nMatchesOne,
    ),
  );
  return rows;
}
