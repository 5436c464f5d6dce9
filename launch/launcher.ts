/**
 * The launcher of one node: hosts the control store (node 0), meets the other nodes' launchers
 * (rendezvous), creates the run directory, runs attempts (restarting up to --max-restarts),
 * forwards every stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, …: os/stop_signals.ts), records
 * launch.json, and returns 0 only when every rank exited 0.
 */
import { resolveDevice } from "../tensor/device_choice.ts";
import type { DeviceKind } from "../tensor/backend.ts";
import { type CudaAvailability, cudaAvailability, gpuSharing } from "../tensor/cuda_backend.ts";
import { cudaKernels, CudaRuntime } from "../ffi/cuda.ts";
import { describePlan, type DevicePlan, planDevices } from "./device_plan.ts";
import { basename } from "node:path";
import type { AttemptEnd, GpuVersions } from "../run_record/record.ts";
import { join, resolve } from "node:path";
import { glooBuildInfo } from "../ffi/gloo.ts";
import { plannedCpuBackend } from "../distributed/pg_config.ts";
import { StoreClient, StoreError } from "../distributed/control/store.ts";
import { StoreServer } from "../distributed/control/store_server.ts";
import { attemptKeys, runKeys } from "../distributed/control/store_keys.ts";
import { ncclLibrary } from "../ffi/nccl.ts";
import { cString } from "../ffi/native.ts";
import { type AttemptHandle, type RunContext, startAttempt } from "./attempt.ts";
import { type LaunchOptions, UsageError } from "./options.ts";
import { LauncherLog } from "./output.ts";
import { signalExitCode } from "../os/exit_status.ts";
import { onStopSignals } from "../os/stop_signals.ts";
import { LaunchTimeout } from "./failure_report.ts";
import {
  createRunDir,
  type LaunchRecord,
  launchRecordPath,
  makeRunId,
  redactToken,
  removeEmptyRunDir,
  writeLaunchRecord,
} from "./run_dir.ts";
import { resolveToken } from "./token.ts";
import { checkScriptTypes } from "./type_check.ts";
import { installLayout } from "../os/install_layout.ts";
import type { RunRecord } from "../run_record/format.ts";
import { RUN_FILES } from "../run_record/files.ts";
import { checkNproc, type NodeCapacity } from "./nproc_limit.ts";
import { lockRunDir, type RunLock } from "./run_lock.ts";

/** Default store port with several nodes (torchrun's). */
const MULTI_NODE_PORT = 29500;
/** How often a launcher refreshes its heartbeat in the store. */
const BEAT_MS = 1000;
/** Node 0 waits at most this long (plus the grace period) for other launchers to leave. */
const EXIT_WAIT_MS = 10_000;
/** Node 0's launcher reaching the store it serves itself: anything slower is a local fault. */
const OWN_STORE_CONNECT_MS = 10_000;

/** Run facts node 0 publishes and every node checks against its own options. */
interface RunInfo {
  runId: string;
  nnodes: number;
  nproc: number;
  maxRestarts: number;
  /** attempts that earlier launches into the run directory made (node 0 reads run.json) */
  attemptBase?: number;
}

/** The GPU setup of the resolved device (null on the CPU). */
function gpuAvailability(device: string): CudaAvailability | null {
  if (device === "cuda") return cudaAvailability();
  if (device === "cuda-emu") return cudaAvailability(undefined, "cuda-emu");
  return null;
}

/** What bounds --nproc on this machine for the resolved device. */
function nodeCapacity(opts: LaunchOptions): NodeCapacity {
  const device = opts.device === "cuda" || opts.device === "cuda-emu" ? opts.device : "cpu";
  const cap: NodeCapacity = {
    device,
    cores: navigator.hardwareConcurrency || 1,
    oversubscribe: opts.oversubscribe,
    shareGpus: gpuSharing(),
  };
  const a = gpuAvailability(device);
  if (a) cap.gpus = a.ok ? a.deviceCount : 0;
  return cap;
}

/** The GPU of each local rank, with the GPUs' names (the driver's; "" when it cannot say). */
function devicePlan(opts: LaunchOptions): DevicePlan {
  const kind = opts.device as DeviceKind;
  const a = gpuAvailability(kind);
  return planDevices(kind, opts.nproc, a, gpuSharing(), (gpu) => {
    try {
      return new CudaRuntime(cudaKernels()).deviceInfo(gpu).name;
    } catch {
      return "";
    }
  });
}

/**
 * The absolute path of --resume's folder: a run directory (its checkpoints/
 * are used) or a checkpoint folder. Refused at once when it holds neither.
 */
function checkResume(dir: string): string {
  const path = resolve(dir);
  const isDir = (p: string) => {
    try {
      return Deno.statSync(p).isDirectory;
    } catch {
      return false;
    }
  };
  if (!isDir(path)) throw new UsageError(`--resume ${dir}: no such folder (looked at ${path})`);
  return path;
}

function checkScript(script: string): string {
  const path = resolve(script);
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch {
    throw new UsageError(`Cannot launch ${script}: no such file (looked at ${path})`);
  }
  if (!info.isFile) throw new UsageError(`Cannot launch ${script}: ${path} is not a file`);
  return path;
}

/** `dtrain rerun`: the script must still be the file it verified, as the ranks are about to start. */
async function checkScriptHash(script: string, expected: string): Promise<void> {
  const { sha256File } = await import("../run_record/record.ts");
  const now = await sha256File(script);
  if (now !== expected) {
    throw new UsageError(
      `${script} changed after \`dtrain rerun\` verified it (sha256 ${expected.slice(0, 12)}… ` +
        `then, ${now.slice(0, 12)}… now); nothing was started`,
    );
  }
}

function startStore(
  opts: LaunchOptions,
  token: string,
  log: LauncherLog,
  lost: (node: number, why: string) => void,
): StoreServer {
  const hostname = opts.nnodes > 1 ? "0.0.0.0" : "127.0.0.1";
  const port = opts.masterPort ?? (opts.nnodes > 1 ? MULTI_NODE_PORT : 0);
  try {
    return StoreServer.listen({
      hostname,
      port,
      token,
      log: (line) => log.info(line),
      onDisconnect: (identity) => {
        const m = /^launcher node (\d+)$/.exec(identity);
        if (m && m[1] !== "0") lost(Number(m[1]), "its launcher disconnected from the store");
      },
    });
  } catch (e) {
    const hint = e instanceof Deno.errors.AddrInUse ? "; choose another --master-port" : "";
    throw new Error(
      `Cannot start the control store on ${hostname}:${port}: ${(e as Error).message}${hint}`,
    );
  }
}

/**
 * `deno check` of the script with the config the ranks run with, before
 * anything starts (a checkout only: the single file carries dtrain as
 * JavaScript, without its types). Throws after printing the type errors.
 */
async function typeCheck(given: string, script: string, log: LauncherLog): Promise<void> {
  const layout = installLayout();
  if (layout?.kind !== "checkout") return;
  const r = await checkScriptTypes(script, {
    config: layout.config,
    onCheck: () =>
      log.info(`type-checking ${given} (once per change of its files; --no-check skips it)`),
  });
  if (r.ok) return;
  console.error(r.output);
  throw new Error(
    `${given} does not type-check (the errors are above): fix them, or start it unchecked with --no-check`,
  );
}

/** Run facts every node must share: a difference is a refusal of the launch. */
const SHARED_FIELDS = ["nnodes", "nproc", "maxRestarts"] as const;
/** How long a launcher that refused the launch keeps node 0's store up for the others to read why. */
const REFUSAL_LINGER_MS = 5000;

/** A launch refused at rendezvous because the nodes were started with different options. */
export class RendezvousRefused extends UsageError {
  override name = "RendezvousRefused";
}

/** The first field in which `other` (node n) differs from `mine`, said as a sentence, or null. */
function mismatch(other: RunInfo & { host?: string }, n: number, mine: RunInfo, me: number) {
  for (const field of SHARED_FIELDS) {
    if (other[field] !== mine[field]) {
      return `node ${n}${other.host ? ` (${other.host})` : ""} runs with ${field}=${
        other[field]
      } but node ${me} with ${field}=${mine[field]}; ` +
        `every node must be given the same --nnodes, --nproc and --max-restarts`;
    }
  }
  return null;
}

/** Meets every node's launcher in the store; returns node 0's run facts (its run id, attempt base). */
async function rendezvous(
  client: StoreClient,
  opts: LaunchOptions,
  runId: string | null,
  attemptBase = 0,
): Promise<RunInfo> {
  const me = opts.nodeRank;
  const claims = await client.add(runKeys.nodeClaim(me), 1);
  if (claims > 1) {
    throw new Error(
      `Node rank ${me} was already claimed by another launcher of this run: give each node its own --node-rank`,
    );
  }
  const mine: RunInfo = {
    runId: runId ?? "",
    nnodes: opts.nnodes,
    nproc: opts.nproc,
    maxRestarts: opts.maxRestarts,
    attemptBase,
  };
  if (me === 0) await client.set(runKeys.info, JSON.stringify(mine));
  await client.set(
    runKeys.nodeInfo(me),
    JSON.stringify({ ...mine, host: Deno.hostname(), pid: Deno.pid }),
  );
  const timeoutMs = opts.rdzvTimeoutS * 1000;
  /** Says why in the store (for every other launcher), then refuses here. */
  const refuse = async (why: string): Promise<never> => {
    await client.set(runKeys.refused, JSON.stringify({ node: me, host: Deno.hostname(), why }))
      .catch(() => {});
    if (me === 0) {
      // This store is about to close: the nodes that joined read the refusal and say goodbye first.
      const others = Array.from({ length: opts.nnodes - 1 }, (_, i) => runKeys.nodeExit(i + 1));
      await client.wait(others, REFUSAL_LINGER_MS).catch(() => {});
    }
    throw new RendezvousRefused(`Rendezvous failed: ${why}`);
  };
  /** Another launcher refused: say so, and why, and leave. */
  const refusedElsewhere = async (): Promise<never> => {
    const raw = await client.getText(runKeys.refused).catch(() => null);
    const r = raw ? JSON.parse(raw) as { node: number; host: string; why: string } : null;
    await client.set(runKeys.nodeExit(me), "refused").catch(() => {});
    throw new RendezvousRefused(
      r
        ? `Rendezvous failed: node ${r.node} (${r.host}) refused the launch: ${r.why}`
        : "Rendezvous failed: another node refused the launch",
    );
  };
  if (me !== 0) {
    // Node 0's facts are in the store before its own node key: compared at once, not after a wait
    // for nodes that will never come (a different --nnodes).
    await client.wait([runKeys.info], timeoutMs).catch(() => {});
    const info0 = await client.getText(runKeys.info).catch(() => null);
    const why = info0 ? mismatch(JSON.parse(info0) as RunInfo, 0, mine, me) : null;
    if (why) await refuse(why);
  }
  const nodes = Array.from({ length: opts.nnodes }, (_, n) => n);
  const refused = client.wait([runKeys.refused], timeoutMs).then(() => "refused" as const);
  refused.catch(() => {});
  try {
    const first = await Promise.race([
      client.wait(nodes.map(runKeys.nodeInfo), timeoutMs),
      refused,
    ]);
    if (first === "refused") await refusedElsewhere();
  } catch (e) {
    if (e instanceof RendezvousRefused) throw e;
    if (await client.get(runKeys.refused).catch(() => null) !== null) await refusedElsewhere();
    if (e instanceof StoreError && e.kind === "timeout") {
      const missing = nodes.filter((n) => e.missingKeys.includes(runKeys.nodeInfo(n)));
      throw new LaunchTimeout(
        `Rendezvous failed: node(s) ${
          missing.join(",") || "?"
        } did not join within ${opts.rdzvTimeoutS} s (--rdzv-timeout)`,
      );
    }
    throw new Error(
      `Rendezvous failed: the control store closed before every node joined (${
        (e as Error).message
      }): node 0's launcher has ended; its output says why`,
    );
  }
  const info = JSON.parse((await client.getText(runKeys.info))!) as RunInfo;
  for (const n of nodes) {
    const other = JSON.parse((await client.getText(runKeys.nodeInfo(n)))!) as RunInfo & {
      host: string;
    };
    const why = mismatch(other, n, mine, me);
    if (why) await refuse(why);
  }
  return info;
}

/** What run.json says of the GPUs of a GPU run: the CUDA library's build hash, versions, NCCL's. */
function gpuVersions(plan: DevicePlan): GpuVersions {
  if (plan.kind === "cpu") return {};
  const emulated = plan.kind === "cuda-emu";
  const a = cudaAvailability(undefined, emulated ? "cuda-emu" : "cuda");
  if (!a.ok) return {};
  const out: GpuVersions = {
    cuda: {
      runtime: emulated ? `${a.runtimeVersion} (emulated)` : a.runtimeVersion,
      driver: emulated ? "none (emulated device)" : a.driverVersion,
      gpus: plan.names,
    },
  };
  try {
    out.nativeCuda = cString(cudaKernels().symbols.dt_build_hash());
  } catch { /* left out */ }
  try {
    const nccl = ncclLibrary(
      undefined,
      emulated && a.libraries.nccl ? a.libraries.nccl : undefined,
    );
    out.nccl = emulated ? `${nccl.version} (stand-in)` : nccl.version;
  } catch { /* no NCCL: a one-rank GPU run needs none */ }
  return out;
}

/**
 * The run.json an earlier launch left in `runDir`, or null. The record's reader (and the schema
 * library it validates with) loads only when there is one: a new run starts without them.
 */
async function readPreviousRecord(runDir: string): Promise<RunRecord | null> {
  try {
    Deno.statSync(join(runDir, RUN_FILES.run));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
  }
  return (await import("../run_record/record.ts")).readRunRecord(runDir);
}

/**
 * run.json of this launch: written as the first attempt begins and
 * rewritten as each attempt begins and ends; continued (not replaced) when
 * the directory holds the record of an earlier launch.
 */
async function startRunRecord(
  ctx: RunContext,
  argv: readonly string[],
  previous: RunRecord | null,
) {
  const {
    beginAttempt,
    behaviourEnv,
    continueRunRecord,
    finishAttempt,
    machineFacts,
    newRunRecord,
    sha256File,
    versions,
    writeRunRecord,
    writeRunRecordAsync,
  } = await import("../run_record/record.ts");
  const { AttemptSchema } = await import("../run_record/format.ts");
  const { opts, runDir, runId, threads, script } = ctx;
  // What CPU ranks' initProcessGroup() will choose (the same rule), and Gloo's versions when it is Gloo.
  // GPU ranks: NCCL, unless they are alone.
  const backend = opts.device === "cpu"
    ? plannedCpuBackend(opts.nnodes, opts.nproc, Deno.env.get("DTRAIN_CPU_BACKEND"))
    : opts.nnodes * opts.nproc > 1
    ? "nccl" as const
    : "single" as const;
  const v = versions(ctx.plan ? gpuVersions(ctx.plan) : {});
  if (backend === "gloo") {
    try {
      const info = glooBuildInfo();
      v.native.gloo = info.buildHash;
      v.gloo = info.version;
    } catch (e) {
      v.native.gloo = `unavailable: ${(e as Error).message}`;
    }
  }
  const input = {
    runId,
    name: basename(runDir),
    argv: ["dtrain", ...argv],
    cwd: Deno.cwd(),
    script: { path: script, sha256: await sha256File(script), args: opts.scriptArgs },
    world: {
      nnodes: opts.nnodes,
      nprocPerNode: opts.nproc,
      hosts: [Deno.hostname()],
      ...(backend ? { backend } : {}),
      device: opts.device,
    },
    ...(opts.resume !== null ? { resume: opts.resume } : {}),
    versions: v,
    env: behaviourEnv({ ...Deno.env.toObject(), DTRAIN_NUM_THREADS: String(threads) }),
    machine: machineFacts(),
  };
  // Written as the first attempt begins (begin(), called right after): one write, not two.
  let rec = previous ? continueRunRecord(previous, input) : newRunRecord(input);
  return {
    /** Records attempt k's start; its writes and fsyncs leave the store answering the ranks. */
    async begin() {
      rec = beginAttempt(rec);
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

/**
 * Runs the launcher with parsed options; returns the process exit code.
 *
 * @example
 * ```ts
 * const code = await launch(parseLaunchArgs(["--nproc", "2", "train.ts"]) as LaunchOptions, Deno.args);
 * ```
 */
export async function launch(opts: LaunchOptions, argv: readonly string[]): Promise<number> {
  const log = new LauncherLog();
  const script = checkScript(opts.script);
  const token = resolveToken(opts);
  // "auto" is resolved once here, so every rank gets the same answer and the notice prints once
  // (after the run directory exists, so that it is in launcher.log too).
  const deviceNotices: string[] = [];
  opts.device = resolveDevice(opts.device, {
    notice: (line) => deviceNotices.push(line.replace(/^dtrain: /, "")),
  });
  // Refused before anything starts: no store, no run directory, no rank.
  checkNproc(opts.nproc, nodeCapacity(opts));
  const plan = devicePlan(opts);
  if (opts.resume !== null) opts.resume = checkResume(opts.resume);
  // After the cheap refusals: a bad option must not wait for seconds of type-checking.
  if (!opts.noCheck) await typeCheck(opts.script, script, log);
  if (opts.expectScriptSha256 !== undefined) await checkScriptHash(script, opts.expectScriptSha256);
  let current: AttemptHandle | null = null;
  let client: StoreClient | null = null;
  const nodeLost = async (node: number, why: string) => {
    // A launcher that said goodbye before disconnecting left normally.
    if (client && await client.get(runKeys.nodeExit(node)).catch(() => null) !== null) return;
    current?.nodeLost(node, why);
    // A launcher that is gone will not say goodbye: say it for it, so node 0 need not wait.
    client?.set(runKeys.nodeExit(node), "disconnected").catch(() => {});
  };
  const server = opts.nodeRank === 0 ? startStore(opts, token, log, nodeLost) : null;
  const masterPort = server?.port ?? opts.masterPort ?? MULTI_NODE_PORT;
  const storeHost = server ? "127.0.0.1" : opts.masterAddr;

  let beat: ReturnType<typeof setInterval> | undefined;
  let preempted = false;
  let runLock: RunLock | null = null;
  /** A run directory this launch created, removed again if nothing ran in it. */
  let createdDir: string | null = null;
  /** The run record of this launch once written (node 0); closed on every way out. */
  let run: Awaited<ReturnType<typeof startRunRecord>> | null = null;
  const onSignal = (sig: Deno.Signal) => {
    preempted = true; // whatever the attempt's outcome, do not restart after this
    if (current) return current.signal(sig);
    log.info(`received ${sig} while no rank is running; exiting`);
    run?.closeIfOpen({
      exitCode: signalExitCode(sig),
      signal: sig,
      reason: `the launcher received ${sig} between attempts; no rank was running`,
      interrupted: true,
    });
    runLock?.release();
    if (createdDir) removeEmptyRunDir(createdDir);
    Deno.exit(signalExitCode(sig));
  };
  // Whatever ends this process from here on (Deno.exit, an error nobody caught), run.json
  // must not say "running" after it.
  const onUnload = () =>
    run?.closeIfOpen({
      exitCode: null,
      reason: "the launcher exited before this attempt ended",
    });
  globalThis.addEventListener("unload", onUnload);
  const stopListening = onStopSignals(onSignal);

  try {
    try {
      client = await StoreClient.connect({
        host: storeHost,
        port: masterPort,
        token,
        timeoutMs: server ? OWN_STORE_CONNECT_MS : opts.rdzvTimeoutS * 1000,
        identity: `launcher node ${opts.nodeRank}`,
        onRetry: (why) =>
          log.info(`waiting for node 0's control store at ${storeHost}:${masterPort}: ${why}`),
      });
    } catch (e) {
      // Node 1.. waited --rdzv-timeout for node 0: a timeout that ended the run.
      if (
        !server && e instanceof StoreError && e.kind === "connect" && / within /.test(e.message)
      ) {
        throw new LaunchTimeout(`${e.message} (--rdzv-timeout ${opts.rdzvTimeoutS} s)`);
      }
      throw e;
    }
    const proposed = opts.nodeRank === 0
      ? createRunDir({ runDir: opts.runDir, runId: makeRunId(script), exclusive: true })
      : null;
    if (proposed?.created) createdDir = proposed.dir;
    let runId: string, attemptBase: number;
    let previous: RunRecord | null = null;
    try {
      // Node 0 refuses a run directory another live launcher holds before anyone joins.
      if (proposed) runLock = lockRunDir(proposed.dir, 0, proposed.runId);
      // A run directory reused to resume keeps its run's id and record (run.json).
      previous = proposed ? await readPreviousRecord(proposed.dir) : null;
      const info = await rendezvous(
        client,
        opts,
        previous?.runId ?? proposed?.runId ?? null,
        previous?.attempts.length ?? 0,
      );
      runId = info.runId;
      attemptBase = info.attemptBase ?? 0;
    } catch (e) {
      // Nothing ran: leave no run directory behind that this launch created.
      runLock?.release();
      runLock = null;
      if (proposed?.created) removeEmptyRunDir(proposed.dir);
      throw e;
    }
    const { dir: runDir } = proposed ??
      createRunDir({ runDir: opts.runDir, runId, exclusive: false });
    runLock ??= lockRunDir(runDir, opts.nodeRank, runId);
    log.attach(
      `${runDir}/${opts.nodeRank === 0 ? "launcher.log" : `launcher-node${opts.nodeRank}.log`}`,
    );
    log.info(
      `run ${runId}: ${
        opts.nnodes > 1 ? `node ${opts.nodeRank} of ${opts.nnodes}, ` : ""
      }logs in ${runDir}`,
    );
    const gone = runLock.previous;
    if (gone) {
      log.info(
        `took over the run directory's lock from run ${gone.runId} (pid ${gone.pid} on ${gone.host}), ` +
          `which ended without releasing it`,
      );
    }

    const c = client;
    beat = setInterval(() => c.post(runKeys.nodeBeat(opts.nodeRank), String(Date.now())), BEAT_MS);
    c.post(runKeys.nodeBeat(opts.nodeRank), String(Date.now()));

    for (const line of deviceNotices) log.info(line);
    const planLine = describePlan(plan, opts.nodeRank, opts.nproc);
    if (planLine) log.info(planLine);
    if (opts.resume !== null) {
      log.info(`a Trainer resumes from the latest good checkpoint in ${opts.resume}`);
    }
    const threads = opts.threads ??
      Math.max(1, Math.floor((navigator.hardwareConcurrency || 1) / opts.nproc));
    const ctx: RunContext = {
      opts,
      client,
      log,
      runId,
      runDir,
      token,
      masterPort,
      threads,
      script,
      plan,
      attemptBase,
    };
    const record: LaunchRecord = {
      runId,
      command: ["dtrain", ...redactToken(argv)],
      script,
      scriptArgs: opts.scriptArgs,
      nproc: opts.nproc,
      nnodes: opts.nnodes,
      nodeRank: opts.nodeRank,
      startedAt: new Date().toISOString(),
      endedAt: null,
      exitCode: null,
      attempts: 0,
      outcome: null,
    };
    const recordPath = launchRecordPath(runDir, opts.nodeRank);

    let code = 1;
    let graceMs = 0;
    for (let k = 0;; k++) {
      record.attempts = k + 1;
      if (k === 0) {
        // The first attempt's ranks start before the records are written: their start-up (a Deno
        // start, module loading) overlaps the launcher's bookkeeping (hashing the script, opening
        // the CPU library for its build hash, loading the record schemas).
        current = startAttempt(ctx, k);
        // Spawning needs this process's event loop (the store it serves): the records wait for it.
        await current.started;
        try {
          writeLaunchRecord(recordPath, record);
          // run.json: the job's rerun record (node 0 only), one entry per attempt.
          run = opts.nodeRank === 0 ? await startRunRecord(ctx, argv, previous) : null;
          await run?.begin();
        } catch (e) {
          // No record, no run: the ranks just started are stopped before the error is reported.
          current.launchError(`cannot write the run's records: ${(e as Error).message}`);
          await current.result;
          throw e;
        }
      } else {
        await run?.begin();
        current = startAttempt(ctx, k);
      }
      const result = await current.result;
      current = null;
      if (result.ok) {
        code = 0;
        record.outcome = `every rank exited 0${k > 0 ? ` after ${k} restart(s)` : ""}`;
        await run?.finish(k, { exitCode: 0 });
        break;
      }
      const { abort } = result;
      code = abort.code;
      graceMs = abort.graceMs;
      record.outcome = abort.detail + (abort.rank !== undefined ? ` (rank ${abort.rank})` : "");
      await run?.finish(k, {
        exitCode: abort.code,
        signal: abort.signal ?? null,
        failingRank: abort.rank ?? null,
        reason: abort.detail,
        interrupted: preempted,
      });
      const restartable = abort.reason === "rank-failed" || abort.reason === "timeout";
      if (!restartable || preempted || k >= opts.maxRestarts) break;
      log.info(
        `restarting every rank (restart ${k + 1} of ${opts.maxRestarts}); DTRAIN_RESTART_COUNT=${
          attemptBase + k + 1
        }`,
      );
    }
    record.endedAt = new Date().toISOString();
    record.exitCode = code;
    writeLaunchRecord(recordPath, record);
    log.info(
      code === 0
        ? `run ${runId} finished: every rank exited 0`
        : `run ${runId} failed: exit code ${code}`,
    );
    await leave(client, opts, server, graceMs);
    return code;
  } catch (e) {
    run?.closeIfOpen({ exitCode: null, reason: `the launcher failed: ${(e as Error).message}` });
    throw e;
  } finally {
    current = null;
    clearInterval(beat);
    stopListening();
    globalThis.removeEventListener("unload", onUnload);
    client?.close();
    await server?.close();
    log.close();
    runLock?.release();
  }
}

/**
 * Ends this launcher's part of the run. Other nodes say they are leaving;
 * node 0 keeps the store up until they have (their ranks may still be
 * saving), or until they are gone.
 */
async function leave(
  client: StoreClient,
  opts: LaunchOptions,
  server: StoreServer | null,
  graceMs: number,
): Promise<void> {
  if (!server) {
    await client.set(runKeys.nodeExit(opts.nodeRank), "1").catch(() => {});
    return;
  }
  const others = Array.from({ length: opts.nnodes - 1 }, (_, i) => runKeys.nodeExit(i + 1));
  if (others.length === 0) return;
  await client.wait(others, EXIT_WAIT_MS + graceMs).catch(() => {});
}
