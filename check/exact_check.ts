/**
 * `dtrain check --exact`: runs the user's script with exact mode switched on
 * as a single process and under the launcher at world sizes 1, 2, 4, … up to
 * N, each recording the hashed state of every optimizer step
 * (DTRAIN_CHECK_HASH_STATE), and compares the runs: every rank of a run
 * against its rank 0, and every run against the single process. The script's
 * numerics stay as it asks (autocast, loss scaling, clipping, dropout):
 * exact mode is meant to hold for them.
 */
import { CHECK_ENV } from "./env.ts";
import { readRankEvents } from "./events.ts";
import { describeExit, type RunContext, type RunResult, type RunSpec, runStage } from "./runs.ts";
import {
  describeDivergence,
  type Divergence,
  firstDivergence,
  type RankStates,
  statesOf,
  tensorsPerStep,
} from "./exact_compare.ts";
import { fail, pass, type Row } from "./verdict.ts";
import { checkShardCount } from "./exact_switch.ts";

/** What one `dtrain check --exact` compares. */
export interface ExactCheckOptions extends RunContext {
  /** the largest world size (a power of two): 1, 2, 4, … up to it are run */
  nproc: number;
  /** optimizer steps compared */
  steps: number;
  /**
   * switch exact mode on in the runs (always, from the command line; a test
   * of the comparison alone may leave it off for a script that differs in any mode)
   */
  exactMode?: boolean;
  /** receives progress lines */
  log: (line: string) => void;
}

/** The verdict: rows for the table, the closing line and the exit code. */
export interface ExactVerdict {
  rows: Row[];
  line: string;
  code: number;
}

/** The world sizes compared: 1, 2, 4, … up to `nproc`, which must be a power of two. */
export function exactWorldSizes(nproc: number): number[] {
  if (!Number.isSafeInteger(nproc) || nproc < 1 || (nproc & (nproc - 1)) !== 0) {
    throw new RangeError(
      `--nproc with --exact must be a power of two (world sizes 1, 2, 4, … up to it are compared), got ${nproc}`,
    );
  }
  const sizes: number[] = [];
  for (let w = 1; w <= nproc; w *= 2) sizes.push(w);
  return sizes;
}

/** The runs: a single process without the launcher, then the launcher at each world size. */
export function exactRuns(o: Pick<ExactCheckOptions, "nproc" | "steps" | "exactMode">): RunSpec[] {
  // The probe ends a run at its (K+1)-th step, after hashing the state K steps left; a Trainer is
  // allowed K+1 steps so that it reaches that point.
  const env: Record<string, string> = {
    [CHECK_ENV.STAGE]: "exact",
    [CHECK_ENV.HASH_STATE]: "1",
    [CHECK_ENV.MAX_STEPS]: String(o.steps + 1),
    [CHECK_ENV.STOP_AFTER]: String(o.steps),
    ...(o.exactMode ?? true ? { [CHECK_ENV.EXACT]: String(checkShardCount(o.nproc)) } : {}),
  };
  return [
    { name: "exact-single", title: "single process", nproc: null, env },
    ...exactWorldSizes(o.nproc).map((w) => ({
      name: `exact-world-${w}`,
      title: `world ${w}`,
      nproc: w,
      env,
    })),
  ];
}

/** One run's outcome as the comparison needs it. */
export type ExactRun =
  | {
    title: string;
    nproc: number | null;
    /** why it failed, for its row */
    failed: string;
    /** the first error line of its log, if any */
    error?: string | null;
  }
  | { title: string; nproc: number | null; ranks: Map<number, RankStates> };

/**
 * The first error message in a run's log (an uncaught error's line, ANSI
 * colours removed), or null: the stack frames the log ends with say less
 * than the refusal above them (a batch exact mode cannot split, a world size
 * that does not divide the shard count).
 */
export function firstErrorLine(logPath: string): string | null {
  let text: string;
  try {
    text = Deno.readTextFileSync(logPath);
  } catch {
    return null;
  }
  // deno-lint-ignore no-control-regex
  const plain = text.replace(/\x1b\[[0-9;]*m/g, "");
  const line = plain.split("\n").find((l) => /\b\w*Error\b:/.test(l) && !/^\s*at /.test(l));
  return line ? line.replace(/^.*?(\w*Error:)/, "$1").trim() : null;
}

function readRun(r: RunResult): ExactRun {
  const base = { title: r.spec.title, nproc: r.spec.nproc };
  if (r.code !== 0) {
    const error = r.timedOut ? null : firstErrorLine(r.logPath);
    return {
      ...base,
      error,
      failed: error
        ? `the run (${r.spec.title}) exited with code ${r.code}: ${error}; see ${r.logPath}`
        : describeExit(r),
    };
  }
  return {
    ...base,
    ranks: new Map([...readRankEvents(r.probeDir)].map(([rank, ev]) => [rank, statesOf(ev)])),
  };
}

/** Runs the script at every world size and compares the runs. */
export async function runExactCheck(o: ExactCheckOptions): Promise<ExactVerdict> {
  const specs = exactRuns(o);
  const results = await Promise.all(specs.map((spec) => {
    o.log(`  running ${spec.name}: ${spec.title}${o.exactMode ?? true ? ", exact mode" : ""}`);
    return runStage(spec, o);
  }));
  return compareExactRuns(results.map(readRun), o.steps);
}

/**
 * The verdict on the runs (the first is the single process, the reference):
 * a row per run (it finished and stepped), per multi-rank run (its ranks
 * agree) and per run against the reference; the closing line names the
 * earliest place any two of them part.
 */
export function compareExactRuns(runs: readonly ExactRun[], steps: number): ExactVerdict {
  const rows: Row[] = [];
  /** every divergence found, with the two runs it names */
  const parted: { d: Divergence; a: string; b: string; order: number }[] = [];
  const usable: { title: string; states: RankStates }[] = [];
  for (const run of runs) {
    const check = `${run.title} ran`;
    if ("failed" in run) {
      rows.push(fail("exact", check, "did not finish", run.failed));
      continue;
    }
    const rank0 = run.ranks.get(0);
    const expected = run.nproc ?? 1;
    if (!rank0 || run.ranks.size !== expected) {
      rows.push(
        fail(
          "exact",
          check,
          `${run.ranks.size}/${expected} ranks recorded`,
          "a rank recorded no events: is the probe installed (DTRAIN_CHECK_OUT)?",
        ),
      );
      continue;
    }
    if (rank0.steps.length === 0) {
      rows.push(
        fail(
          "exact",
          check,
          "0 optimizer steps",
          "the script made no optimizer step, so there is no state to compare",
        ),
      );
      continue;
    }
    rows.push(
      pass(
        "exact",
        check,
        `${rank0.steps.length} steps, ${tensorsPerStep(rank0)} tensors hashed per step`,
      ),
    );
    for (const [rank, states] of run.ranks) {
      if (rank === 0) continue;
      const d = firstDivergence(rank0, states);
      if (!d) continue;
      const a = `${run.title} rank 0`, b = `${run.title} rank ${rank}`;
      rows.push(
        fail(
          "exact",
          `${run.title}: ranks agree`,
          `rank ${rank} differs`,
          describeDivergence(d, a, b),
        ),
      );
      parted.push({ d, a, b, order: parted.length });
    }
    if (run.ranks.size > 1 && !rows.some((r) => r.check === `${run.title}: ranks agree`)) {
      rows.push(pass("exact", `${run.title}: ranks agree`, `${run.ranks.size} ranks identical`));
    }
    usable.push({ title: run.title, states: rank0 });
  }
  // the single process, or the first run that finished when it did not
  const reference = usable[0];
  if (reference) {
    for (const other of usable) {
      if (other === reference) continue;
      const check = `${other.title} vs ${reference.title}`;
      const d = firstDivergence(reference.states, other.states);
      if (!d) {
        rows.push(pass("exact", check, `identical at all ${other.states.steps.length} steps`));
        continue;
      }
      rows.push(
        fail(
          "exact",
          check,
          `bits part at step ${d.step}`,
          describeDivergence(d, reference.title, other.title),
        ),
      );
      parted.push({ d, a: reference.title, b: other.title, order: parted.length });
    }
  }
  // runs that failed with the same first error are named together
  const failures = new Map<string, string[]>();
  for (const run of runs) {
    if (!("failed" in run)) continue;
    const key = run.error ?? "";
    failures.set(key, [...failures.get(key) ?? [], run.title]);
  }
  const notStepping = rows.filter((r) =>
    r.outcome === "FAIL" && r.check.endsWith(" ran") && r.measured !== "did not finish"
  );
  if (parted.length > 0) {
    const first = parted.sort((x, y) => x.d.step - y.d.step || x.order - y.order)[0]!;
    return {
      rows,
      line: `dtrain check --exact: DIFFERENT — ${describeDivergence(first.d, first.a, first.b)}`,
      code: 1,
    };
  }
  if (failures.size > 0 || notStepping.length > 0) {
    const parts = [
      ...[...failures].map(([error, titles]) =>
        `${titles.join(", ")} did not finish${error ? `: ${error}` : ""}`
      ),
      ...notStepping.map((r) => `${r.check.replace(/ ran$/, "")}: ${r.measured}`),
    ];
    return { rows, line: `dtrain check --exact: FAIL — ${parts.join("; ")}`, code: 1 };
  }
  const names = runs.map((r) => r.title).join(", ");
  const k = usable[0]?.states.steps.length ?? 0;
  const short = k < steps ? ` (the script made ${k} of the ${steps} steps asked for)` : "";
  return {
    rows,
    line:
      `dtrain check --exact: identical — ${names} hold the same bits at every one of ${k} steps${short}`,
    code: 0,
  };
}
