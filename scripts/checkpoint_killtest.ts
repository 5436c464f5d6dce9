/**
 * kill -9 reliability check of checkpoint saves: a writer process saves
 * checkpoints in a loop; each trial SIGKILLs it at a random (seeded) moment
 * and checks that the latest loadable checkpoint verifies and holds exactly
 * what its step wrote. A benchmark, not run in CI (200 trials by default, a
 * few minutes); tests/train/checkpoint/kill_test.ts runs a short version.
 *
 * With --async the writer saves asynchronously (a worker thread commits).
 *
 *   deno run -A scripts/checkpoint_killtest.ts [--trials 200] [--seed 1] [--max-delay-ms 300]
 *     [--scale 16] [--dir D] [--keep] [--async]
 */
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { CheckpointManager } from "../train/checkpoint/manager.ts";
import { FOLDER_LOCK_FILE } from "../train/checkpoint/folder_lock.ts";
import { assertHoldsPayload, payloadForStep } from "../tests/train/scripts/checkpoint_payloads.ts";

const WRITER = fileURLToPath(
  new URL("../tests/train/scripts/checkpoint_writer.ts", import.meta.url),
);
/** The writer's rotation: keep the last 2, and every 5th step forever. */
const KEEP_LAST = 2;
const KEEP_EVERY = 5;

/** Options of runKillTrials(). */
export interface KillTrialOptions {
  /** Checkpoint directory shared by all trials (each resumes where the last was killed). */
  dir: string;
  trials: number;
  /** Seed of the kill delays. */
  seed: number;
  /**
   * Each kill lands a uniform [0, maxDelayMs) after the writer began its
   * k-th save, k uniform in 1..3: anchored to the writer's progress rather
   * than to the clock, so a slow (loaded) machine still gets kills mid-save.
   */
  maxDelayMs: number;
  /** Payload size factor (1 = a few KiB per checkpoint, 16 = about 250 KiB). */
  scale: number;
  /** Called with one line per trial. */
  log?: (line: string) => void;
  /** The writer's saves are asynchronous (CheckpointManager's `async`). */
  async?: boolean;
}

/** What the trials saw. */
export interface KillTrialSummary {
  trials: number;
  /** Kills that landed inside save() (after "begin", before "end"). */
  killedDuringWrite: number;
  killedBetweenWrites: number;
  /** Kills during a write after which that write's checkpoint was already the latest. */
  interruptedSaveCommitted: number;
  /** Trials whose loadLatest() passed over a checkpoint with a warning. */
  fallbacks: number;
  /** Saves the writers completed over all trials. */
  savesCompleted: number;
  /** Step of the last verified checkpoint. */
  finalStep: number;
}

/**
 * Runs the trials; throws on the first one whose latest checkpoint is
 * missing, fails to verify, or differs from what its step wrote. Every
 * writer process is killed and reaped, also on failure.
 */
export async function runKillTrials(opts: KillTrialOptions): Promise<KillTrialSummary> {
  const random = generator(opts.seed);
  const summary: KillTrialSummary = {
    trials: 0,
    killedDuringWrite: 0,
    killedBetweenWrites: 0,
    interruptedSaveCommitted: 0,
    fallbacks: 0,
    savesCompleted: 0,
    finalStep: 0,
  };
  for (let trial = 1; trial <= opts.trials; trial++) {
    const afterBegin = 1 + Math.floor(random() * 3);
    const delayMs = Math.floor(random() * opts.maxDelayMs);
    const { lines, stderr } = await runAndKill(opts, afterBegin, delayMs);
    const context =
      `trial ${trial} (seed ${opts.seed}, kill ${delayMs} ms after save #${afterBegin} began)`;
    let outcome: TrialOutcome;
    try {
      outcome = verifyAfterKill(opts, lines);
    } catch (e) {
      const tail = lines.slice(-6).join(" | ");
      throw new Error(
        `${context}: ${(e as Error).message}\n` +
          `writer stdout tail: ${tail}\nwriter stderr tail: ${stderr.slice(-800)}`,
        { cause: e },
      );
    }
    summary.trials++;
    if (outcome.duringWrite) summary.killedDuringWrite++;
    else summary.killedBetweenWrites++;
    if (outcome.duringWrite && outcome.loadedStep === outcome.lastBegun) {
      summary.interruptedSaveCommitted++;
    }
    if (outcome.skipped > 0) summary.fallbacks++;
    summary.savesCompleted += outcome.saves;
    summary.finalStep = outcome.loadedStep;
    const when = outcome.duringWrite ? `during save ${outcome.lastBegun}` : "between saves";
    opts.log?.(`${context}: killed ${when}; latest verifies: step ${outcome.loadedStep}`);
  }
  return summary;
}

/** Starts a writer, waits until it begins its `afterBegin`-th save, waits `delayMs`, SIGKILLs it; returns its output. */
async function runAndKill(
  opts: KillTrialOptions,
  afterBegin: number,
  delayMs: number,
): Promise<{ lines: string[]; stderr: string }> {
  const args = ["run", "-A", WRITER, "--dir", opts.dir, "--scale", String(opts.scale)];
  args.push("--keep-last", String(KEEP_LAST), "--keep-every", String(KEEP_EVERY));
  if (opts.async) args.push("--async");
  const child = new Deno.Command(Deno.execPath(), {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let exited = false;
  const status = child.status.finally(() => exited = true);
  const stderr = new Response(child.stderr).text();
  const lines: string[] = [];
  let begun = 0;
  let onBegun = () => {};
  const armed = new Promise<void>((resolve) => onBegun = resolve);
  const stdout = collectLines(child.stdout, (line) => {
    lines.push(line);
    if (line.startsWith("begin ") && ++begun === afterBegin) onBegun();
  });
  try {
    const first = await Promise.race([
      armed.then(() => "armed" as const),
      status.then(() => "exited" as const),
    ]);
    if (first === "exited") {
      throw new Error(
        `the writer exited before save #${afterBegin}: ${(await stderr).slice(-800)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    if (exited) throw new Error(`the writer exited by itself: ${(await stderr).slice(-800)}`);
    child.kill("SIGKILL");
    const end = await status;
    if (end.signal !== "SIGKILL") {
      throw new Error(
        `the writer ended with code ${end.code}, not by SIGKILL: ${(await stderr).slice(-800)}`,
      );
    }
    await stdout;
    return { lines, stderr: await stderr };
  } finally {
    if (!exited) child.kill("SIGKILL");
    await status;
    await Promise.allSettled([stdout, stderr]);
  }
}

async function collectLines(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  let pending = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    pending += chunk;
    for (let i = pending.indexOf("\n"); i >= 0; i = pending.indexOf("\n")) {
      onLine(pending.slice(0, i));
      pending = pending.slice(i + 1);
    }
  }
  if (pending !== "") onLine(pending);
}

interface TrialOutcome {
  duringWrite: boolean;
  lastBegun: number | null;
  loadedStep: number;
  skipped: number;
  saves: number;
}

/**
 * What must hold after a kill: every save that printed "end" is durable, so
 * the latest checkpoint is that step, or the step being saved when the kill
 * landed; and it holds exactly what that step wrote.
 */
function verifyAfterKill(opts: KillTrialOptions, lines: string[]): TrialOutcome {
  const events = lines.map((l) => l.split(" ")).map(([what, n]) => ({ what, step: Number(n) }));
  const resumed = events.find((e) => e.what === "ready")!.step;
  const ends = events.filter((e) => e.what === "end");
  const last = events.at(-1)!;
  const duringWrite = last.what === "begin";
  const committed = ends.at(-1)?.step ?? resumed;
  const allowed = duringWrite ? [committed, last.step] : [committed];
  const warnings: string[] = [];
  const manager = new CheckpointManager(opts.dir, { rank: 0, onWarning: (m) => warnings.push(m) });
  const loaded = manager.loadLatest();
  if (loaded === null) {
    if (committed !== 0) {
      throw new Error(`no checkpoint loads, but step ${committed} had been saved`);
    }
    return {
      duringWrite,
      lastBegun: duringWrite ? last.step : null,
      loadedStep: 0,
      skipped: 0,
      saves: 0,
    };
  }
  if (!allowed.includes(loaded.step)) {
    const expected = allowed.join(", ");
    throw new Error(
      `the latest checkpoint is step ${loaded.step}, expected one of ${expected}; ` +
        `warnings: ${warnings.join(" / ")}`,
    );
  }
  assertHoldsPayload(loaded, payloadForStep(loaded.step, { scale: opts.scale }));
  return {
    duringWrite,
    lastBegun: duringWrite ? last.step : null,
    loadedStep: loaded.step,
    skipped: loaded.skipped.length,
    saves: ends.length,
  };
}

/**
 * After the trials: one more save in this process must clean up what the
 * kills left, and every checkpoint that remains must verify. Returns the
 * names left in the directory.
 */
export function finalCheck(opts: Pick<KillTrialOptions, "dir" | "scale">, step: number): string[] {
  const manager = new CheckpointManager(opts.dir, {
    rank: 0,
    keepLast: KEEP_LAST,
    keepEvery: KEEP_EVERY,
    onWarning: () => {},
  });
  manager.save(payloadForStep(step, { scale: opts.scale }));
  for (const c of manager.list()) {
    if (!c.complete) throw new Error(`${c.dir} is not a complete checkpoint after the final save`);
    assertHoldsPayload(manager.load(c.dir), payloadForStep(c.step, { scale: opts.scale }));
  }
  // the folder's lock file (train/checkpoint/folder_lock.ts) stays there by design
  const names = [...Deno.readDirSync(opts.dir)].map((e) => e.name)
    .filter((n) => n !== FOLDER_LOCK_FILE).sort();
  const stray = names.filter((n) => n !== "latest" && !/^step-\d{8}$/.test(n));
  if (stray.length > 0) throw new Error(`leftovers after the final save: ${stray.join(", ")}`);
  const kept = names.filter((n) => n !== "latest").map((n) => Number(n.slice(5)));
  const expected = kept.filter((s) => s % KEEP_EVERY !== 0);
  if (expected.length > KEEP_LAST) {
    const list = expected.join(", ");
    throw new Error(
      `rotation kept ${list} beside every ${KEEP_EVERY}th step, expected at most ${KEEP_LAST}`,
    );
  }
  return names;
}

/** mulberry32: the kill delays are reproducible from the seed. */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      trials: { type: "string", default: "200" },
      seed: { type: "string", default: "1" },
      "max-delay-ms": { type: "string", default: "300" },
      scale: { type: "string", default: "16" },
      dir: { type: "string" },
      keep: { type: "boolean", default: false },
      async: { type: "boolean", default: false },
    },
  });
  const dir = values.dir ?? Deno.makeTempDirSync({ prefix: "dtrain-killtest-" });
  const opts: KillTrialOptions = {
    dir,
    trials: Number(values.trials),
    seed: Number(values.seed),
    maxDelayMs: Number(values["max-delay-ms"]),
    scale: Number(values.scale),
    log: (line) => console.log(line),
    async: values.async,
  };
  const started = performance.now();
  try {
    const summary = await runKillTrials(opts);
    const left = finalCheck(opts, summary.finalStep + 1);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    console.log(
      `\n${summary.trials} trials in ${seconds} s: ${summary.killedDuringWrite} kills during a save, ` +
        `${summary.killedBetweenWrites} between saves; ${summary.interruptedSaveCommitted} interrupted saves had already committed; ` +
        `${summary.fallbacks} loads fell back past a bad checkpoint; ${summary.savesCompleted} saves completed.\n` +
        `All ${summary.trials} latest checkpoints verified and held exactly what their step wrote. ` +
        `After a final save the directory holds latest and ${left.length - 1} checkpoints ` +
        `(every ${KEEP_EVERY}th step and the last ${KEEP_LAST}), no leftovers.`,
    );
  } finally {
    if (values.dir === undefined && !values.keep) Deno.removeSync(dir, { recursive: true });
    else console.log(`checkpoints left in ${dir}`);
  }
}
