/**
 * The run directory format, `dtrain.run/1`: zod schemas of run.json,
 * config.json, metrics.jsonl (step and evaluation lines) and data_order.jsonl, the line encoders writers
 * use, and `readRunDir()`, whose errors name the file, line and field.
 * docs/RUN_DIR.md describes the same format for people.
 */
import { join } from "node:path";
import { z } from "zod";
import { RUN_FILES } from "./files.ts";
import { lazySchema } from "./lazy_schema.ts";
import { JsonBoundsError, parseBoundedJson } from "../io/json_bounds.ts";

/** The value of run.json's `format` field; a reader refuses any other. */
export const RUN_FORMAT = "dtrain.run/1";

export { RUN_FILES };

const time = lazySchema(() => z.iso.datetime({ offset: true }));
const sha256 = lazySchema(() =>
  z.string().regex(/^[0-9a-f]{64}$/, "expected 64 lowercase hex digits (a sha256)")
);
const count = lazySchema(() => z.int().nonnegative());
/** A number that may be non-finite: written as "NaN", "Infinity" or "-Infinity" since JSON has no such numbers. */
const real = lazySchema(() =>
  z.union([z.number(), z.enum(["NaN", "Infinity", "-Infinity"])])
    .transform((v) => typeof v === "number" ? v : Number(v))
);

/** One launch attempt: the first has attempt 0 (= DTRAIN_RESTART_COUNT of its ranks). */
export const AttemptSchema = lazySchema(() =>
  z.object({
    attempt: count,
    startedAt: time,
    endedAt: time.nullable(),
    exitCode: z.int().nullable(),
    signal: z.string().nullable(),
    failingRank: count.nullable(),
    reason: z.string().nullable(),
    /** the process group the ranks trained with, as rank 0 reported it (absent when none was made) */
    processGroup: z.object({
      /** "nccl", "shm" or "single" */
      backend: z.string(),
      worldSize: z.int().positive(),
      /** rank 0's device: "cpu", "cuda:0", "cuda-emu:0" */
      device: z.string(),
    }).optional(),
    /** the numerics policy rank 0 trained under, as it reported it last (absent in older runs) */
    numerics: NumericsRecordSchema.optional(),
    /** what the attempt's Trainer resumed from (absent: it started fresh, or is no Trainer) */
    resumed: z.object({
      /** the checkpoint's folder */
      checkpoint: z.string(),
      step: count,
      /** the run whose state it adopted ("" when the state names none) */
      savedBy: z.string(),
      /** each change of the training config since the checkpoint: "key saved → now" */
      configChanges: z.array(z.string()),
    }).optional(),
  })
);

/** Versions of everything that computes: the CUDA fields only on GPU runs. */
export const VersionsSchema = lazySchema(() =>
  z.object({
    dtrain: z.string(),
    deno: z.string(),
    v8: z.string(),
    typescript: z.string(),
    /** build hashes (dt_build_hash) of the native libraries that were loaded */
    native: z.object({
      cpu: z.string().optional(),
      cuda: z.string().optional(),
      gloo: z.string().optional(),
    }),
    cuda: z.object({ runtime: z.string(), driver: z.string(), gpus: z.array(z.string()) })
      .optional(),
    nccl: z.string().optional(),
    /** Gloo's version (libgloo), on runs whose CPU ranks span machines */
    gloo: z.string().optional(),
  })
);

/** Facts about node 0's machine that can change results or speed. */
export const MachineSchema = lazySchema(() =>
  z.object({
    hostname: z.string(),
    os: z.string(),
    arch: z.string(),
    cpuModel: z.string(),
    cpus: count,
    memBytes: count,
  })
);

/** The launcher's command line and where it ran. */
const CommandSchema = lazySchema(() =>
  z.object({ argv: z.array(z.string()).min(1), cwd: z.string() })
);
/** The user's script as launched: its path, its content's hash, its arguments. */
const ScriptSchema = lazySchema(() =>
  z.object({ path: z.string(), sha256, args: z.array(z.string()) })
);
/** How many nodes and ranks, and which hosts. */
const WorldShape = lazySchema(() =>
  z.object({
    nnodes: z.int().positive(),
    nprocPerNode: z.int().positive(),
    worldSize: z.int().positive(),
    hosts: z.array(z.string()),
  })
);

/**
 * One launch of the run: present in run.json when its directory was reused
 * (a resume with --run-dir), one entry per `dtrain` command, in order. The
 * top-level command, script, world, versions and env are the latest launch's.
 */
export const LaunchSchema = lazySchema(() =>
  z.object({
    /** the first attempt this launch made */
    firstAttempt: count,
    startedAt: time,
    command: CommandSchema,
    script: ScriptSchema,
    world: WorldShape,
  })
);

/** run.json: written by the launcher at start and rewritten at the end of every attempt. */
export const RunRecordSchema = lazySchema(() =>
  z.object({
    format: z.literal(RUN_FORMAT),
    runId: z.string().min(1),
    name: z.string(),
    createdAt: time,
    endedAt: time.nullable(),
    command: CommandSchema,
    script: ScriptSchema,
    world: WorldShape.extend({
      /** where ranks compute, as the launcher resolved --device: "cpu", "cuda" or "cuda-emu" */
      device: z.string().optional(),
      /** the process group the ranks use, as planned: "single", "shm" (one machine), "gloo"
       *  (several), "nccl" (GPU ranks) */
      backend: z.enum(["single", "shm", "gloo", "nccl"]).optional(),
    }),
    /** --resume: the folder whose latest good checkpoint a Trainer continues from */
    resume: z.string().optional(),
    versions: VersionsSchema,
    machine: MachineSchema.optional(),
    env: z.record(z.string(), z.string()),
    attempts: z.array(AttemptSchema),
    /** every launch, when the run directory was launched into more than once */
    launches: z.array(LaunchSchema).optional(),
    status: z.enum(["running", "succeeded", "failed", "interrupted"]),
  }).superRefine((r, ctx) => {
    const { nnodes, nprocPerNode, worldSize } = r.world;
    if (worldSize !== nnodes * nprocPerNode) {
      ctx.addIssue({
        code: "custom",
        path: ["world", "worldSize"],
        message: `worldSize ${worldSize} != nnodes ${nnodes} × nprocPerNode ${nprocPerNode}`,
      });
    }
    r.attempts.forEach((a, i) => {
      if (a.attempt !== i) {
        ctx.addIssue({
          code: "custom",
          path: ["attempts", i, "attempt"],
          message:
            `expected attempt ${i} (attempts are numbered 0, 1, … in order), got ${a.attempt}`,
        });
      }
      if (a.endedAt === null && i < r.attempts.length - 1) {
        ctx.addIssue({
          code: "custom",
          path: ["attempts", i, "endedAt"],
          message: "only the last attempt may still be open (endedAt null)",
        });
      }
    });
  })
);

/** A numerics policy as the records hold it (tensor/numerics_policy.ts). */
export const NumericsRecordSchema = lazySchema(() =>
  z.object({
    autocast: z.enum(["as-called", "f32"]),
    lossScaling: z.boolean(),
    clipping: z.boolean(),
    dropout: z.boolean(),
    deterministicReductions: z.boolean(),
    tf32: z.boolean(),
    /** exact mode's shard count, or false (absent in runs recorded before exact mode) */
    exact: z.union([z.literal(false), z.number()]).optional(),
  })
);

/** config.json: written once by rank 0 of the training code. */
export const ConfigRecordSchema = lazySchema(() =>
  z.object({
    /** the resolved, validated training config */
    config: z.record(z.string(), z.unknown()),
    seed: z.int(),
    worldSize: z.int().positive(),
    /** e.g. "cpu", "cuda" or "cuda-emu" */
    device: z.string(),
    /** the process group's backend: "single", "shm", "gloo" (and "nccl" on GPUs) */
    processGroup: z.string().optional(),
    /** the numerics policy the training ran under (absent in runs recorded before it existed) */
    numerics: NumericsRecordSchema.optional(),
  })
);

/** One metrics.jsonl line: one optimizer step, appended by rank 0. */
export const MetricsRecordSchema = lazySchema(() =>
  z.object({
    step: count,
    epoch: count,
    /** which launch attempt wrote it: a resumed run repeats steps with a higher attempt */
    attempt: count,
    /** mean over ranks; may be non-finite */
    loss: real,
    lr: z.number(),
    gradNorm: real.nullable(),
    lossScale: z.number().positive().nullable(),
    /** optimizer steps skipped so far (AMP overflow) */
    skipped: count,
    samplesPerS: z.number().nonnegative(),
    tokensPerS: z.number().nonnegative().nullable(),
    stepMs: z.number().nonnegative(),
    dataWaitMs: z.number().nonnegative(),
    memBytes: count,
    /** this step's wall time on each rank, index = rank */
    stepMsByRank: z.array(z.number().nonnegative()).optional(),
    /** samples the step trained on, all ranks (absent in files of older writers) */
    samples: count.optional(),
  })
);

/** Longest evaluation metric name, in characters. */
export const MAX_EVAL_NAME = 200;

/** Why `name` cannot name an evaluation metric (it becomes a TensorBoard tag), or null. */
function badEvalName(name: string): string | null {
  if (name.length === 0 || name.length > MAX_EVAL_NAME) {
    return `must be 1 to ${MAX_EVAL_NAME} characters, got ${name.length}`;
  }
  if (!name.isWellFormed() || /\p{Cc}/u.test(name)) {
    return "must be printable text (no control characters or lone surrogates)";
  }
  return null;
}

/**
 * One evaluation line of metrics.jsonl: the results of evaluating the model
 * after optimizer step `step`. Told from step lines by `kind`.
 */
export const EvalRecordSchema = lazySchema(() =>
  z.object({
    kind: z.literal("eval"),
    step: count,
    epoch: count,
    attempt: count,
    /** metric name -> value; may be non-finite */
    metrics: z.record(z.string(), real).superRefine((m, ctx) => {
      const names = Object.keys(m);
      if (names.length === 0) {
        ctx.addIssue({ code: "custom", message: "an evaluation needs at least one metric" });
      }
      for (const name of names) {
        const why = badEvalName(name);
        if (why) {
          ctx.addIssue({
            code: "custom",
            message: `evaluation metric name ${JSON.stringify(name.slice(0, 40))} ${why}`,
          });
        }
      }
    }),
  })
);

/** One data_order.jsonl line: one rank's index order for one epoch, appended by rank 0. */
export const DataOrderRecordSchema = lazySchema(() =>
  z.object({
    epoch: count,
    rank: count,
    /** indices this rank visits in the epoch */
    count,
    /** sha256 of the indices as little-endian int32 */
    sha256,
    /** the first min(16, count) indices */
    first: z.array(z.int()).max(16),
  }).refine((r) => r.first.length === Math.min(16, r.count), {
    message: "first must hold min(16, count) indices",
    path: ["first"],
  })
);

export type Attempt = z.output<typeof AttemptSchema>;
export type Launch = z.output<typeof LaunchSchema>;
export type Versions = z.output<typeof VersionsSchema>;
export type Machine = z.output<typeof MachineSchema>;
export type RunRecord = z.output<typeof RunRecordSchema>;
export type ConfigRecord = z.output<typeof ConfigRecordSchema>;
export type MetricsRecord = z.output<typeof MetricsRecordSchema>;
export type EvalRecord = z.output<typeof EvalRecordSchema>;
export type DataOrderRecord = z.output<typeof DataOrderRecordSchema>;

/** Describes zod issues as `field.path: message`, the first three of them. */
export function describeIssues(error: z.ZodError): string {
  const where = (path: PropertyKey[]) =>
    path.map((p, i) => typeof p === "number" ? `[${p}]` : `${i > 0 ? "." : ""}${String(p)}`).join(
      "",
    ) || "(top level)";
  const shown = error.issues.slice(0, 3).map((i) => `${where(i.path)}: ${i.message}`);
  const more = error.issues.length > 3 ? `; and ${error.issues.length - 3} more` : "";
  return shown.join("; ") + more;
}

/** Validates `value` against `schema` or throws a TypeError that starts with `what`. */
function validate<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const r = schema.safeParse(value);
  if (!r.success) throw new TypeError(`${what}: ${describeIssues(r.error)}`);
  return r.data;
}

/** JSON.stringify, writing non-finite numbers as "NaN", "Infinity" or "-Infinity". */
function encodeJson(value: unknown, indent?: number): string {
  return JSON.stringify(
    value,
    (_k, v) => typeof v === "number" && !Number.isFinite(v) ? String(v) : v,
    indent,
  );
}

/** Encodes and checks one line, so a writer can never append what a reader would refuse. */
function encodeLine<S extends z.ZodType>(schema: S, value: z.output<S>, file: string): string {
  const text = encodeJson(value);
  validate(schema, JSON.parse(text), `Cannot write this ${file} line`);
  return text + "\n";
}

/**
 * One metrics.jsonl line (with its newline), checked against the format;
 * a non-finite loss or grad norm is written as "NaN"/"Infinity".
 *
 * @example
 * ```ts
 * await Deno.writeTextFile(join(dir, RUN_FILES.metrics), metricsLine(m), { append: true });
 * ```
 */
export function metricsLine(m: MetricsRecord): string {
  return encodeLine(MetricsRecordSchema, m, RUN_FILES.metrics);
}

/**
 * One evaluation line of metrics.jsonl (with its newline), checked against
 * the format; non-finite values are written as "NaN"/"Infinity".
 */
export function evalLine(e: EvalRecord): string {
  return encodeLine(EvalRecordSchema, e, RUN_FILES.metrics);
}

/** One data_order.jsonl line (with its newline), checked against the format. */
export function dataOrderLine(d: DataOrderRecord): string {
  return encodeLine(DataOrderRecordSchema, d, RUN_FILES.dataOrder);
}

/** The text of run.json or config.json for `value`, checked against `schema`. */
export function jsonFileText<S extends z.ZodType>(
  schema: S,
  value: z.output<S>,
  file: string,
): string {
  const text = encodeJson(value, 2);
  validate(schema, JSON.parse(text), `Cannot write ${file}`);
  return text + "\n";
}

/**
 * The largest record files a reader loads: run.json and config.json are a few KiB when dtrain
 * writes them; metrics.jsonl and data_order.jsonl grow by a line per step or epoch. Anything
 * larger is not a record, and reading it would only exhaust the memory.
 */
export const MAX_RECORD_BYTES = { json: 16 << 20, jsonl: 1 << 30, line: 1 << 20 } as const;

/** Reads a file as text (refusing one over `maxBytes`), or null when it does not exist. */
function readOptional(path: string, maxBytes: number): string | null {
  try {
    const size = Deno.statSync(path).size;
    if (size > maxBytes) {
      throw new JsonBoundsError(
        `${path}: ${size} bytes, more than the ${maxBytes} a dtrain record may have`,
      );
    }
    return Deno.readTextFileSync(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
    if (e instanceof JsonBoundsError) throw e;
    throw new Error(`Cannot read ${path}: ${(e as Error).message}`, { cause: e });
  }
}

/** Parses a whole JSON file; errors name the file and the line or field. */
export function parseJsonFile<S extends z.ZodType>(
  schema: S,
  text: string,
  path: string,
): z.output<S> {
  let value: unknown;
  try {
    value = parseBoundedJson(text, path, { maxChars: MAX_RECORD_BYTES.json });
  } catch (e) {
    if (e instanceof JsonBoundsError) throw e;
    const message = (e as Error).message;
    throw new TypeError(`${path}:${errorLine(text, message)}: not valid JSON: ${message}`);
  }
  return validate(schema, value, path);
}

/** The 1-based line a JSON.parse error points at (V8 gives a character position, or none at the end of input). */
function errorLine(text: string, message: string): number {
  const at = /at position (\d+)/.exec(message);
  const end = at ? Number(at[1]) : text.length;
  return text.slice(0, end).split("\n").length;
}

/** What a JSON-lines file held, and what was wrong with it that did not stop reading. */
export interface JsonLines<T> {
  records: T[];
  warnings: string[];
}

/**
 * Parses JSON lines; a malformed line throws `path:line: …`. The one
 * exception is a final line without its newline that does not parse: a
 * writer killed mid-append leaves exactly that, so it is dropped with a
 * warning and the complete lines before it are kept. Blank lines are skipped.
 */
export function parseJsonLines<S extends z.ZodType>(
  schema: S | ((value: unknown) => S),
  text: string,
  path: string,
): JsonLines<z.output<S>> {
  const schemaOf = typeof schema === "function" ? schema : () => schema;
  const lines = text.split("\n");
  const unterminated = lines.pop() ?? "";
  const records: z.output<S>[] = [];
  const warnings: string[] = [];
  const parse = (line: string, n: number) => {
    let value: unknown;
    try {
      value = parseBoundedJson(line, `${path}:${n}`, { maxChars: MAX_RECORD_BYTES.line });
    } catch (e) {
      if (e instanceof JsonBoundsError) throw e;
      throw new TypeError(
        `${path}:${n}: not valid JSON (${(e as Error).message}): ${preview(line)}`,
      );
    }
    records.push(validate(schemaOf(value), value, `${path}:${n}`));
  };
  lines.forEach((line, i) => {
    if (line.trim() !== "") parse(line, i + 1);
  });
  if (unterminated.trim() !== "") {
    try {
      parse(unterminated, lines.length + 1);
    } catch (e) {
      warnings.push(
        `${
          (e as Error).message
        } — ignored: the last line has no newline (the writer was stopped mid-line)`,
      );
    }
  }
  return { records, warnings };
}

function preview(line: string): string {
  return JSON.stringify(line.length > 60 ? `${line.slice(0, 60)}…` : line);
}

/** Everything a reader needs from one run directory. */
export interface RunDir {
  dir: string;
  run: RunRecord;
  /** null when config.json is missing */
  config: ConfigRecord | null;
  /** step lines, in file order; empty when metrics.jsonl is missing */
  metrics: MetricsRecord[];
  /** evaluation lines of metrics.jsonl, in file order */
  evals: EvalRecord[];
  /** in file order; empty when data_order.jsonl is missing */
  dataOrder: DataOrderRecord[];
  /** optional files that are absent, by name */
  missing: string[];
  /** problems that did not stop reading (a truncated last line) */
  warnings: string[];
}

/**
 * Reads and validates a run directory. run.json is required; the other
 * files are optional and listed in `missing` when absent; other files are
 * ignored.
 *
 * @example
 * ```ts
 * const r = readRunDir("runs/20251129-093000-train-3fa2");
 * console.log(r.run.status, r.metrics.length, r.missing);
 * ```
 */
export function readRunDir(dir: string): RunDir {
  const runPath = join(dir, RUN_FILES.run);
  const runText = readOptional(runPath, MAX_RECORD_BYTES.json);
  if (runText === null) {
    throw new TypeError(
      `${dir} is not a dtrain run directory: ${RUN_FILES.run} is missing (the launcher writes it when a run starts)`,
    );
  }
  const run = parseJsonFile(RunRecordSchema, runText, runPath);
  const missing: string[] = [];
  const warnings: string[] = [];
  const optional = (name: string, maxBytes: number): [string, string | null] => {
    const path = join(dir, name);
    const text = readOptional(path, maxBytes);
    if (text === null) missing.push(name);
    return [path, text];
  };
  const [configPath, configText] = optional(RUN_FILES.config, MAX_RECORD_BYTES.json);
  const config = configText === null
    ? null
    : parseJsonFile(ConfigRecordSchema, configText, configPath);
  const lines = <S extends z.ZodType>(
    schema: S | ((value: unknown) => S),
    name: string,
  ): z.output<S>[] => {
    const [path, text] = optional(name, MAX_RECORD_BYTES.jsonl);
    if (text === null) return [];
    const parsed = parseJsonLines(schema, text, path);
    warnings.push(...parsed.warnings);
    return parsed.records;
  };
  const all = lines(metricsLineSchema, RUN_FILES.metrics);
  const metrics = all.filter((m): m is MetricsRecord => !("kind" in m));
  const evals = all.filter((m): m is EvalRecord => "kind" in m);
  const dataOrder = lines(DataOrderRecordSchema, RUN_FILES.dataOrder);
  return { dir, run, config, metrics, evals, dataOrder, missing, warnings };
}

/** The schema of one metrics.jsonl line: an evaluation when it has a `kind`, else a step. */
function metricsLineSchema(
  value: unknown,
): typeof MetricsRecordSchema | typeof EvalRecordSchema {
  const kind = typeof value === "object" && value !== null && "kind" in value;
  return kind ? EvalRecordSchema : MetricsRecordSchema;
}

/**
 * The run's final trajectory: for each step, the record of the latest
 * attempt that logged it (a resumed run repeats steps), sorted by step.
 */
export function finalSteps(metrics: readonly MetricsRecord[]): MetricsRecord[] {
  const byStep = new Map<number, MetricsRecord>();
  for (const m of metrics) {
    const seen = byStep.get(m.step);
    if (seen === undefined || m.attempt >= seen.attempt) byStep.set(m.step, m);
  }
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

/**
 * Each evaluation metric's final series, by name in order of first
 * appearance: for each step, the value of the latest attempt that evaluated
 * it there (the last one in file order among equals), sorted by step.
 *
 * @example
 * ```ts
 * finalEvals(readRunDir("runs/a").evals).get("accuracy"); // → [[120, 0.81], [240, 0.86]]
 * ```
 */
export function finalEvals(
  evals: readonly EvalRecord[],
): Map<string, Array<readonly [number, number]>> {
  const latest = new Map<string, Map<number, { attempt: number; value: number }>>();
  for (const e of evals) {
    for (const [name, value] of Object.entries(e.metrics)) {
      let byStep = latest.get(name);
      if (byStep === undefined) latest.set(name, byStep = new Map());
      const seen = byStep.get(e.step);
      if (seen === undefined || e.attempt >= seen.attempt) {
        byStep.set(e.step, { attempt: e.attempt, value });
      }
    }
  }
  return new Map(
    [...latest].map(([name, byStep]) => [
      name,
      [...byStep].sort((a, b) => a[0] - b[0]).map(([step, v]) => [step, v.value] as const),
    ]),
  );
}
