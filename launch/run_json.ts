/**
 * The launcher's part of run.json, the job's rerun record (node 0): an earlier launch's record of
 * the run directory, continued; the run's facts (script, world, the native side as
 * nativeVersions() finds it, the behaviour-changing environment, the machine) written as the first
 * attempt begins, and each attempt's start and end, with what its rank 0 reported.
 */
import { basename, join } from "node:path";
import type { AttemptEnd } from "../run_record/record.ts";
import type { RunRecord } from "../run_record/format.ts";
import { RUN_FILES } from "../run_record/files.ts";
import { nativeVersions } from "../ffi/native_versions.ts";
import { plannedCpuBackend } from "../distributed/pg_config.ts";
import { attemptKeys } from "../distributed/control/store_keys.ts";
import type { RunContext } from "./attempt.ts";

/**
 * The run.json an earlier launch left in `runDir`, or null. The record's reader (and the schema
 * library it validates with) loads only when there is one: a new run starts without them.
 */
export async function readPreviousRecord(runDir: string): Promise<RunRecord | null> {
  try {
    Deno.statSync(join(runDir, RUN_FILES.run));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
  }
  return (await import("../run_record/record.ts")).readRunRecord(runDir);
}

type RecordModule = typeof import("../run_record/record.ts");

/** What CPU ranks' initProcessGroup() will choose (the same rule); GPU ranks NCCL, unless alone. */
function plannedBackend(opts: RunContext["opts"]) {
  return opts.device === "cpu"
    ? plannedCpuBackend(opts.nnodes, opts.nproc, Deno.env.get("DTRAIN_CPU_BACKEND"))
    : opts.nnodes * opts.nproc > 1
    ? "nccl" as const
    : "single" as const;
}

/**
 * The run's facts for run.json: command, script (hashed), world, versions (the native side as the
 * ranks will find it: the GPU stack of a GPU run, Gloo when it is Gloo), environment, machine.
 */
async function runFacts(
  ctx: RunContext,
  argv: readonly string[],
  record: RecordModule,
  createdAt?: Date,
): Promise<Parameters<RecordModule["newRunRecord"]>[0]> {
  const { opts, runDir, runId, threads, script, plan } = ctx;
  const backend = plannedBackend(opts);
  const gpu = plan?.kind === "cuda" || plan?.kind === "cuda-emu" ? plan.kind : undefined;
  const native = nativeVersions({ gpu, gloo: backend === "gloo" });
  return {
    runId,
    name: basename(runDir),
    ...(createdAt ? { createdAt } : {}),
    argv: ["dtrain", ...argv],
    cwd: Deno.cwd(),
    script: { path: script, sha256: await record.sha256File(script), args: opts.scriptArgs },
    world: {
      nnodes: opts.nnodes,
      nprocPerNode: opts.nproc,
      hosts: [Deno.hostname()],
      ...(backend ? { backend } : {}),
      device: opts.device,
    },
    ...(opts.resume !== null ? { resume: opts.resume } : {}),
    versions: record.versions(native, gpu ? plan!.names : []),
    env: record.behaviourEnv({ ...Deno.env.toObject(), DTRAIN_NUM_THREADS: String(threads) }),
    machine: record.machineFacts(),
  };
}

/**
 * run.json of this launch: written as the first attempt begins and
 * rewritten as each attempt begins and ends; continued (not replaced) when
 * the directory holds the record of an earlier launch. `startedAt`: when the
 * launch started its first attempt, when that was before this call (the
 * record's creation time; default now).
 */
export async function startRunRecord(
  ctx: RunContext,
  argv: readonly string[],
  previous: RunRecord | null,
  startedAt?: Date,
) {
  // Loaded here, not at the launcher's start: the record's schemas cost time a new run spends
  // while its first ranks start.
  const record = await import("../run_record/record.ts");
  const { beginAttempt, continueRunRecord, finishAttempt, newRunRecord } = record;
  const { writeRunRecord, writeRunRecordAsync } = record;
  const { AttemptSchema } = await import("../run_record/format.ts");
  const { runDir } = ctx;
  const input = await runFacts(ctx, argv, record, startedAt);
  // Written as the first attempt begins (begin(), called right after): one write, not two.
  let rec = previous ? continueRunRecord(previous, input) : newRunRecord(input);
  return {
    /**
     * Records attempt k's start (`at`: when it started, default now); its writes and fsyncs leave
     * the store answering the ranks.
     */
    async begin(at?: Date) {
      rec = beginAttempt(rec, at);
      await writeRunRecordAsync(runDir, rec);
    },
    /** Ends attempt k's entry, with the process group and numerics policy its rank 0 reported. */
    async finish(k: number, end: AttemptEnd) {
      const keys = attemptKeys((ctx.attemptBase ?? 0) + k); // the ranks' DTRAIN_RESTART_COUNT
      const report = async <S extends { parse(v: unknown): unknown }>(key: string, schema: S) => {
        const raw = await ctx.client.getText(key).catch(() => null);
        try {
          return raw === null ? undefined : schema.parse(JSON.parse(raw)) as ReturnType<S["parse"]>;
        } catch {
          return undefined; // a malformed report is left out of the record
        }
      };
      const processGroup = await report(keys.processGroup, AttemptSchema.shape.processGroup);
      const numerics = await report(keys.numerics, AttemptSchema.shape.numerics);
      const resumed = await report(keys.resume, AttemptSchema.shape.resumed);
      rec = finishAttempt(rec, {
        ...end,
        ...(processGroup ? { processGroup } : {}),
        ...(numerics ? { numerics } : {}),
        ...(resumed ? { resumed } : {}),
      });
      writeRunRecord(runDir, rec);
    },
    /**
     * Ends the open attempt, if any, synchronously (from a signal handler or the unload
     * event): the record never says "running" once its launcher is gone. Never throws.
     */
    closeIfOpen(end: AttemptEnd) {
      if (rec.attempts.at(-1)?.endedAt !== null) return;
      try {
        rec = finishAttempt(rec, end);
        writeRunRecord(runDir, rec);
      } catch (e) {
        console.error(`dtrain: could not close ${runDir}/run.json: ${(e as Error).message}`);
      }
    },
  };
}

/** The run.json of this launch, as startRunRecord() opened it. */
export type RunJson = Awaited<ReturnType<typeof startRunRecord>>;
