/**
 * One launch attempt on one node: start the ranks once every node is ready, watch them, and at the
 * first failure, timeout, signal or lost node (the abort record in the store) stop every rank
 * (SIGTERM, then SIGKILL after a grace period). Node 0 also polls phases to diagnose hangs.
 */
import { rankEnv } from "../distributed/control/env.ts";
import { LAUNCHER_LOADED, markedAt, profiling } from "../profile/profile.ts";
import { setImmediate } from "node:timers";
import { type RankView, toFailureNotice, toRankView } from "../distributed/control/rank_state.ts";
import type { StoreClient } from "../distributed/control/store.ts";
import { attemptKeys, runKeys } from "../distributed/control/store_keys.ts";
import { type FailedExit, firstFailure, type StoredNotice } from "./first_failure.ts";
import { type AbortRecord, failureSummary, TIMEOUT_EXIT_CODE } from "./failure_report.ts";
import { readStatePage, statePagePath } from "../distributed/control/state_page.ts";
import { findHang, rankList, rankTable, seconds } from "./hang_report.ts";
import type { LaunchOptions } from "./options.ts";
import type { LauncherLog } from "./output.ts";
import { type RankExit, RankProcess } from "./rank_process.ts";
import { signalExitCode } from "../os/exit_status.ts";
import { join } from "node:path";
import { removeAttemptSegments } from "./attempt_segments.ts";
import { type DevicePlan, rankDeviceEnv } from "./device_plan.ts";
import { RemoteRanks } from "./node_view.ts";
import { forwardNodeView } from "./page_forwarder.ts";

/** Ranks stopped because of a failure get this long between SIGTERM and SIGKILL (the whole stop must take < 5 s). */
export const FAILURE_GRACE_MS = 2000;
/** How often node 0 reads the ranks' phases. */
const POLL_MS = 500;
/** A node whose launcher has not been heard from for this long is declared lost. */
const NODE_SILENT_MS = 30_000;
/** How long a launcher waits for a failed rank's last output before summarising. */
const OUTPUT_DRAIN_MS = 500;
/** How long a rank's "a peer closed its group" may wait for the failure behind it to show. */
const PEER_SETTLE_MS = 1500;
const PEER_POLL_MS = 100;
/** How long a rank that reported its failure gets to exit, for its exit code. */
const CAUSE_EXIT_WAIT_MS = 2000;

/** Everything about the run that every attempt shares. */
export interface RunContext {
  opts: LaunchOptions;
  client: StoreClient;
  log: LauncherLog;
  runId: string;
  runDir: string;
  token: string;
  masterPort: number;
  threads: number;
  /** absolute path of the user's script */
  script: string;
  /** the device of each local rank (absent: the CPU) */
  plan?: DevicePlan;
  /**
   * Attempts earlier launches into this run directory made (run.json): this
   * launch's attempt k is the run's attempt attemptBase + k, the ranks'
   * DTRAIN_RESTART_COUNT (default 0).
   */
  attemptBase?: number;
}

/** How an attempt ended. */
export type AttemptResult = { ok: true } | { ok: false; abort: AbortRecord };

/** The hooks through which the launcher reaches the running attempt. */
export interface AttemptHandle {
  /** the launcher received a stop signal (os/stop_signals.ts: SIGINT, SIGTERM, SIGHUP, SIGQUIT, …) */
  signal(sig: Deno.Signal): void;
  /** node 0's store saw node n's launcher disconnect */
  nodeLost(node: number, why: string): void;
  /** the launcher cannot go on with this attempt (e.g. its run record cannot be written) */
  launchError(detail: string): void;
  /** resolves once this node's ranks are spawned (or the attempt stopped before they all were) */
  readonly started: Promise<void>;
  readonly result: Promise<AttemptResult>;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function describeExit(e: RankExit): string {
  return e.signal ? `killed by ${e.signal}` : `exit code ${e.code}`;
}

/** Starts attempt `k` on this node; the handle's result settles when it is over here. */
export function startAttempt(ctx: RunContext, k: number): AttemptHandle {
  const { opts, client, log } = ctx;
  // The run's attempt number: what the ranks get as DTRAIN_RESTART_COUNT, and what names their
  // store keys and shared-memory segments (a launch into an existing run directory starts past 0).
  const attempt = (ctx.attemptBase ?? 0) + k;
  const keys = attemptKeys(attempt);
  const node = opts.nodeRank;
  const nodes = Array.from({ length: opts.nnodes }, (_, i) => i);
  const worldSize = opts.nnodes * opts.nproc;
  const ranks: RankProcess[] = [];
  /** local ranks that exited non-zero, in the order seen */
  const failedExits: FailedExit[] = [];
  let abortRequested = false;
  let stopping = false;
  let finished = false;
  let signalsSeen = 0;
  let forwarded = false;
  /** when the first stop signal came (performance.now()) */
  let firstSignalAt = 0;
  /** what a second stop signal did, for the record (it overrides the first one's promise of a grace) */
  let escalation: string | null = null;
  let resolveResult!: (r: AttemptResult) => void;
  const result = new Promise<AttemptResult>((r) => resolveResult = r);
  /** Other nodes' ranks as their launchers forward them; this node's are forwarded from `run`. */
  const remote = new RemoteRanks(node, opts.nproc);
  let stopForwarding: (() => void) | null = null;
  const finish = (r: AttemptResult) => {
    if (finished) return;
    finished = true;
    stopForwarding?.();
    // Every local rank has ended: nothing can attach to this attempt's segments any more.
    const { failed } = removeAttemptSegments(ctx.runId, attempt);
    if (failed.length > 0) {
      log.info(
        `could not remove shared-memory segment(s) of attempt ${attempt}: ${failed.join("; ")}`,
      );
    }
    resolveResult(r);
  };

  /** The /proc state letter ("T": stopped by a signal) of each of this node's running ranks, now. */
  const processStates = (): Map<number, string> => {
    const out = new Map<number, string>();
    for (const p of ranks) {
      if (p.exit) continue;
      try {
        const stat = Deno.readTextFileSync(`/proc/${p.pid}/stat`);
        out.set(p.rank, stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3));
      } catch { /* gone */ }
    }
    return out;
  };
  const stateOf = (states: Map<number, string>) => (rank: number, pid: number) =>
    ranks.some((p) => p.rank === rank && p.pid === pid)
      ? states.get(rank) ?? null
      : remote.processState(rank, pid);

  /**
   * Each rank's latest state: its store record, or its state page when this node's rank wrote the
   * page more recently (a rank that blocks in a collective from a loop without `await` has written
   * that collective's entry to its page, while its store record may still wait in the writer).
   */
  const views = async (): Promise<RankView[]> => {
    const stored = (await client.list(keys.rankStatePrefix)).map(toRankView).filter((
      v,
    ): v is RankView => v !== null);
    const byRank = new Map(stored.map((v) => [v.rank, v]));
    for (const p of ranks) {
      if (p.exit) continue;
      const page = readStatePage(statePagePath(ctx.runDir, p.rank));
      const view = page && toRankView({ key: "", ...page });
      if (!view || view.rank !== p.rank || view.pid !== p.pid) continue;
      const known = byRank.get(p.rank);
      if (!known || view.heardS <= known.heardS) byRank.set(p.rank, view);
    }
    if (opts.nnodes > 1) {
      remote.update(await client.list(keys.nodeViewPrefix));
      remote.merge(byRank);
    }
    return [...byRank.values()].sort((a, b) => a.rank - b.rank);
  };

  /** Writes the abort record unless another launcher already did. */
  const requestAbort = async (rec: AbortRecord) => {
    if (abortRequested || finished) return;
    abortRequested = true;
    try {
      if (await client.add(keys.abortTicket, 1) === 1) {
        await client.set(keys.abort, JSON.stringify(rec));
      }
    } catch (e) {
      // The store is gone: stop this node's ranks on our own.
      onAbort({
        ...rec,
        detail: `${rec.detail} (and the control store is unreachable: ${(e as Error).message})`,
      });
    }
  };

  const onAbort = async (rec: AbortRecord) => {
    if (stopping) return;
    stopping = true;
    let before: RankView[] | null = null;
    const failedIn = new Map<number, number>();
    let notices: StoredNotice[] = [];
    try {
      before = await views();
      notices = await readNotices();
      for (const { notice } of notices) {
        if (notice.collective) failedIn.set(notice.rank, notice.collective.seq);
      }
    } catch { /* the store is gone: nobody can say what the other ranks were doing */ }
    const statesBefore = processStates();
    const signalled = rec.reason === "signal" && forwarded;
    const exits = await Promise.all(
      ranks.map((p) => p.stop(rec.graceMs, { alreadySignalled: signalled })),
    );
    await Promise.race([Promise.all(ranks.map((p) => p.outputDone)), sleep(OUTPUT_DRAIN_MS)]);
    const exitText = new Map(ranks.map((p, i) => [p.rank, describeExit(exits[i]!)]));
    const table = before
      ? rankTable(before, {
        worldSize,
        nproc: opts.nproc,
        exits: exitText,
        processState: stateOf(statesBefore),
        failedIn,
      })
      : "(unknown: the control store is unreachable)";
    log.info(failureSummary(rec, table) + otherFailures(rec, notices));
    log.info(
      `node ${node}'s ranks ended: ${
        ranks.map((p, i) => `rank ${p.rank} ${describeExit(exits[i]!)}`).join(", ")
      }`,
    );
    client.set(keys.nodeStopped(node), "1").catch(() => {});
    finish({ ok: false, abort: { ...rec, detail: whatHappened(rec, exits) } });
  };

  /** Every failure notice of this attempt, with its age by the store's clock. */
  const readNotices = async (): Promise<StoredNotice[]> =>
    (await client.list(keys.rankStatePrefix)).flatMap((e) => {
      const notice = e.key.endsWith("/failure") ? toFailureNotice(e.value) : null;
      return notice ? [{ notice, ageMs: e.ageMs }] : [];
    });

  /**
   * A rank exited non-zero: find the attempt's first real failure (which may be another rank's:
   * this one may only have seen a peer close its group) and have every rank stopped.
   */
  const onRankExit = async (p: RankProcess, exit: RankExit) => {
    if (stopping || abortRequested) return;
    if (exit.code === 0) {
      if (ranks.every((q) => q.exit?.code === 0)) {
        await client.set(keys.nodeDone(node), "1").catch(() => {});
      }
      return;
    }
    failedExits.push({ rank: p.rank, order: failedExits.length });
    let notices: StoredNotice[] = [];
    const cause = async () => {
      try {
        notices = await readNotices();
      } catch { /* no store: judge from this node's exits and what was read before */ }
      return firstFailure(notices, failedExits)!;
    };
    let first = await cause();
    // Only a consequence so far: the rank behind it reported its error before closing its group,
    // or is dying without a word (its exit or another launcher's abort is moments away).
    for (const until = Date.now() + PEER_SETTLE_MS; first.kind === "peer" && Date.now() < until;) {
      await sleep(PEER_POLL_MS);
      if (stopping || abortRequested) return;
      first = await cause();
    }
    const mine = ranks.find((q) => q.rank === first.rank);
    let firstExit = mine?.exit ?? null;
    if (mine && !firstExit) {
      // It reported its failure and is exiting: its exit code is what the launcher exits with.
      firstExit = await Promise.race([mine.exited, sleep(CAUSE_EXIT_WAIT_MS).then(() => null)]);
    }
    if (mine) await Promise.race([mine.outputDone, sleep(OUTPUT_DRAIN_MS)]);
    if (stopping || abortRequested) return;
    const notice = first.kind === "died" ? null : first.notice;
    const timedOut = first.kind === "timeout";
    const code = timedOut
      ? TIMEOUT_EXIT_CODE
      : firstExit && firstExit.code !== 0
      ? firstExit.code
      : 1;
    await requestAbort({
      reason: timedOut ? "timeout" : "rank-failed",
      node,
      rank: first.rank,
      rankNode: Math.floor(first.rank / opts.nproc),
      ...(mine ?? notice ? { pid: mine?.pid ?? notice!.pid } : {}),
      code,
      ...(firstExit?.signal ? { signal: firstExit.signal } : {}),
      detail: timedOut
        ? `a timeout fired (exit code ${TIMEOUT_EXIT_CODE})`
        : firstExit
        ? describeExit(firstExit)
        : "it reported an error",
      graceMs: FAILURE_GRACE_MS,
      ...(notice ? { notice } : { stderrTail: mine?.stderrTail() ?? [] }),
    });
  };

  /** Node 0: prints the hang table once per hang, fails the run past --timeout, watches node heartbeats. */
  const watch = async () => {
    let reported: string | null = null;
    while (!finished && !stopping) {
      await sleep(POLL_MS);
      if (finished || stopping) return;
      let current: RankView[];
      try {
        current = await views();
      } catch {
        return;
      }
      const hang = findHang(
        current,
        worldSize,
        Math.min(opts.hangWarnS, opts.timeoutS),
        stateOf(processStates()),
        remote.silentNodes(current),
      );
      if (hang && hang.waitS >= opts.timeoutS) {
        const table = rankTable(current, {
          worldSize,
          nproc: opts.nproc,
          processState: stateOf(processStates()),
        });
        await requestAbort({
          reason: "timeout",
          node,
          code: TIMEOUT_EXIT_CODE,
          detail: `timeout: a collective waited ${
            seconds(hang.waitS)
          } (--timeout ${opts.timeoutS} s); stopping every rank`,
          graceMs: FAILURE_GRACE_MS,
          table: `${hang.sentence}\n${table}`,
        });
        return;
      }
      if (hang && hang.waitS >= opts.hangWarnS && hang.signature !== reported) {
        reported = hang.signature;
        log.info(
          `hang: ${hang.sentence}\n${
            rankTable(current, {
              worldSize,
              nproc: opts.nproc,
              processState: stateOf(processStates()),
            })
          }`,
        );
      } else if (!hang) {
        reported = null;
      }
      for (const n of nodes.slice(1)) {
        const beat = await client.list(runKeys.nodeBeat(n)).catch(() => []);
        if (beat[0] && beat[0].ageMs > NODE_SILENT_MS) {
          nodeLost(n, `its launcher has not been heard from for ${seconds(beat[0].ageMs / 1000)}`);
        }
      }
    }
  };

  const nodeLost = (n: number, why: string) => {
    requestAbort({
      reason: "node-lost",
      node,
      code: 1,
      detail: `node ${n} is lost: ${why}; stopping every rank`,
      graceMs: FAILURE_GRACE_MS,
    });
  };

  /**
   * The record's account of a stop: the first reason, then what really happened to this node's
   * ranks — a second signal that killed them at once, or ranks killed when their grace ran out.
   */
  const whatHappened = (rec: AbortRecord, exits: RankExit[]): string => {
    if (escalation) return `${rec.detail}; ${escalation}`;
    if (rec.reason !== "signal") return rec.detail;
    const killed = ranks.filter((_, i) => exits[i]!.signal === "SIGKILL").map((p) => p.rank);
    return killed.length === 0
      ? `${rec.detail}; every rank of node ${node} exited within it`
      : `${rec.detail}; rank(s) ${rankList(killed)} did not exit within ${
        seconds(rec.graceMs / 1000)
      } and were killed (SIGKILL)`;
  };

  const signal = (sig: Deno.Signal) => {
    signalsSeen++;
    if (signalsSeen > 1) {
      const after = seconds((performance.now() - firstSignalAt) / 1000);
      log.info(
        `second stop signal (${sig}, ${after} after the first): killing every rank of node ${node} now`,
      );
      escalation ??=
        `then a second signal (${sig}) ${after} later killed every rank of node ${node} at once (SIGKILL), before its grace ended`;
      for (const p of ranks) p.signal("SIGKILL");
      return;
    }
    firstSignalAt = performance.now();
    // The ranks stop on SIGINT or SIGTERM (the Trainer, stopRequested()); any other stop signal
    // reaches them as SIGTERM.
    const forwardAs: Deno.Signal = sig === "SIGINT" ? "SIGINT" : "SIGTERM";
    log.info(
      `received ${sig}: forwarding ${
        forwardAs === sig ? "it" : forwardAs
      } to the ranks, which have ${opts.graceS} s to save and exit (send it again to kill them now)`,
    );
    forwarded = true;
    for (const p of ranks) p.signal(forwardAs);
    requestAbort({
      reason: "signal",
      node,
      signal: sig,
      code: signalExitCode(sig),
      detail:
        `node ${node}'s launcher received ${sig}; ranks got ${opts.graceS} s to save and exit`,
      graceMs: opts.graceS * 1000,
    });
  };

  const run = async () => {
    // The abort record is watched from the start: a signal or a failure on another node while the
    // nodes gather or while ranks are being started ends the attempt at once.
    const aborted = client.wait([keys.abort]).then(async () => {
      const raw = await client.getText(keys.abort);
      onAbort(JSON.parse(raw ?? "{}") as AbortRecord);
    });
    aborted.catch(() => {/* the store closed: handled below */});
    try {
      await client.set(keys.nodeReady(node), "1");
      await Promise.race([
        client.wait(nodes.map(keys.nodeReady), opts.rdzvTimeoutS * 1000),
        aborted,
      ]);
    } catch (e) {
      if (stopping || abortRequested) return;
      return finish({
        ok: false,
        abort: {
          reason: "node-lost",
          node,
          code: 1,
          detail: `attempt ${attempt} could not start: ${(e as Error).message}`,
          graceMs: 0,
        },
      });
    }
    for (let local = 0; local < opts.nproc; local++) {
      // A signal or an abort stops the loop between two ranks (their handlers run in the yield).
      if (stopping || abortRequested) break;
      const rank = node * opts.nproc + local;
      const env = rankEnv({
        world: {
          rank,
          localRank: local,
          worldSize,
          localWorldSize: opts.nproc,
          groupRank: node,
          nnodes: opts.nnodes,
          masterAddr: opts.masterAddr,
          masterPort: ctx.masterPort,
          runId: ctx.runId,
          runDir: ctx.runDir,
          isLauncher: true,
        },
        storeToken: ctx.token,
        numThreads: ctx.threads,
        hangWarnS: opts.hangWarnS,
        timeoutS: opts.timeoutS,
        restartCount: attempt,
        logRanks: opts.logRanks,
        launcherPid: Deno.pid,
        device: opts.device,
        resume: opts.resume,
        allowConfigChange: opts.allowConfigChange,
      });
      if (ctx.plan) Object.assign(env, rankDeviceEnv(ctx.plan, local, Deno.hostname()));
      let p: RankProcess;
      try {
        p = new RankProcess({
          rank,
          script: ctx.script,
          scriptArgs: opts.scriptArgs,
          env: { ...env, ...profileClock() },
          logPath: join(ctx.runDir, `rank-${rank}.log`),
          logRanks: opts.logRanks,
        });
      } catch (e) {
        requestAbort({
          reason: "launch-error",
          node,
          rank,
          code: 1,
          detail: `cannot start rank ${rank}: ${(e as Error).message}`,
          graceMs: FAILURE_GRACE_MS,
        });
        break;
      }
      ranks.push(p);
      p.exited.then((exit) => onRankExit(p, exit));
      // One turn of the event loop (signals, the store) between spawns: setImmediate takes a few
      // microseconds, a setTimeout(0) waits for the timer clock's next millisecond.
      await new Promise((r) => setImmediate(r));
    }
    if (ranks.length === 0) return; // stopped before any rank started: onAbort reports it
    log.info(
      `attempt ${attempt}: started ranks ${
        rankList(ranks.map((p) => p.rank))
      } of ${worldSize} on node ${node} ` +
        `(pids ${ranks.map((p) => p.pid).join(",")}; ${ctx.threads} native thread(s) each)`,
    );
    if (opts.nnodes > 1 && !finished) {
      stopForwarding = forwardNodeView({
        client,
        key: keys.nodeView(node),
        node,
        runDir: ctx.runDir,
        ranks: () => ranks,
        processStates,
      });
    }
    if (stopping) return;
    if (node === 0) watch();
    client.wait(nodes.map(keys.nodeDone)).then(async () => {
      if (stopping) return;
      await Promise.race([Promise.all(ranks.map((p) => p.outputDone)), sleep(OUTPUT_DRAIN_MS)]);
      await client.set(keys.nodeStopped(node), "1").catch(() => {});
      finish({ ok: true });
    }).catch(() => {});
    client.closed.then((info) => {
      if (info.byClient || finished) return;
      abortRequested = true;
      onAbort({
        reason: "node-lost",
        node,
        code: 1,
        detail:
          `lost the control store at ${opts.masterAddr}:${ctx.masterPort} (${info.reason}); node 0's launcher is gone`,
        graceMs: FAILURE_GRACE_MS,
      });
    });
  };
  const started = run();

  const launchError = (detail: string) => {
    requestAbort({ reason: "launch-error", node, code: 1, detail, graceMs: FAILURE_GRACE_MS });
  };
  return { signal, nodeLost, launchError, started, result };
}

/**
 * The other ranks' own errors, one line each after the summary (the ranks no longer print them):
 * the same error as the first failure's is named by rank only, a different one by its message.
 */
function otherFailures(rec: AbortRecord, notices: readonly StoredNotice[]): string {
  const first = rec.notice;
  const others = notices.map((n) => n.notice).filter((n) =>
    n.kind !== "peer" && n.rank !== rec.rank
  ).sort((a, b) => a.rank - b.rank);
  const same = others.filter((n) => first && n.message === first.message).map((n) => n.rank);
  const lines = [
    ...(same.length > 0 ? [`rank(s) ${rankList(same)} failed with the same error`] : []),
    ...others.filter((n) => !first || n.message !== first.message).map((n) =>
      `rank ${n.rank} also failed: ${n.message}`
    ),
  ];
  return lines.map((l) => `\n${l}`).join("");
}

/** With DTRAIN_PROFILE=1, when this launcher started and spawns a rank (epoch ms), for the rank's report. */
function profileClock(): Record<string, string> {
  if (!profiling) return {};
  const loaded = markedAt(LAUNCHER_LOADED);
  return {
    DTRAIN_LAUNCH_MS: String(performance.timeOrigin),
    ...(loaded !== undefined
      ? { DTRAIN_LAUNCHER_LOADED_MS: String(performance.timeOrigin + loaded) }
      : {}),
    DTRAIN_SPAWN_MS: String(performance.timeOrigin + performance.now()),
  };
}
