/**
 * One launch attempt on one node: start the ranks once every node is ready, watch them, and at the
 * first failure, timeout, signal or lost node (the abort record in the store) stop every rank
 * (SIGTERM, then SIGKILL after a grace period). Node 0 also polls phases to diagnose hangs.
 */
import { rankEnv } from "../distributed/control/env.ts";
import { cpuNowMs, LAUNCHER_LOADED, markedAt, markedCpuAt, profiling } from "../profile/profile.ts";
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
  /** the V8 flags of each rank (launch/rank_v8_flags.ts) */
  v8Flags: readonly string[];
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

/**
 * One attempt on this node. Its stages, in the order an attempt happens: gather (every node ready,
 * the abort record watched from the start), spawn this node's ranks, then watch them (node 0: hangs
 * and other nodes' heartbeats; every node: its ranks' exits, all nodes done, the store lost) until
 * the attempt ends — every node done, or an abort (a rank's failure, a timeout, a stop signal, a
 * lost node) that stops every rank and reports what each was doing.
 */
class Attempt implements AttemptHandle {
  readonly result: Promise<AttemptResult>;
  readonly started: Promise<void>;
  private readonly opts: LaunchOptions;
  private readonly client: StoreClient;
  private readonly log: LauncherLog;
  /** the run's attempt number: the ranks' DTRAIN_RESTART_COUNT, in their keys and segments' names */
  private readonly attempt: number;
  private readonly keys: ReturnType<typeof attemptKeys>;
  private readonly node: number;
  private readonly nodes: number[];
  private readonly worldSize: number;
  private readonly ranks: RankProcess[] = [];
  /** local ranks that exited non-zero, in the order seen */
  private readonly failedExits: FailedExit[] = [];
  private abortRequested = false;
  private stopping = false;
  private finished = false;
  private signalsSeen = 0;
  private forwarded = false;
  /** when the first stop signal came (performance.now()) */
  private firstSignalAt = 0;
  /** what a second stop signal did, for the record (it overrides the first one's promise of a grace) */
  private escalation: string | null = null;
  private resolveResult!: (r: AttemptResult) => void;
  /** Other nodes' ranks as their launchers forward them; this node's are forwarded from `run`. */
  private remote!: RemoteRanks;
  private stopForwarding: (() => void) | null = null;

  constructor(private readonly ctx: RunContext, k: number) {
    this.opts = ctx.opts;
    this.client = ctx.client;
    this.log = ctx.log;
    // A launch into an existing run directory starts past 0.
    this.attempt = (ctx.attemptBase ?? 0) + k;
    this.keys = attemptKeys(this.attempt);
    this.node = this.opts.nodeRank;
    this.nodes = Array.from({ length: this.opts.nnodes }, (_, i) => i);
    this.worldSize = this.opts.nnodes * this.opts.nproc;
    this.remote = new RemoteRanks(this.node, this.opts.nproc);
    this.result = new Promise<AttemptResult>((r) => this.resolveResult = r);
    this.started = this.run();
  }

  /** The stages from the start: gather, spawn, then watch. */
  private async run(): Promise<void> {
    if (!await this.gather()) return;
    await this.spawnRanks();
    if (this.ranks.length === 0) return; // stopped before any rank started: onAbort reports it
    this.announceStarted();
    if (this.opts.nnodes > 1 && !this.finished) this.forwardView();
    if (this.stopping) return;
    if (this.node === 0) this.watchHangsAndNodes();
    this.watchEnd();
  }

  /**
   * Stage 1: this node is ready, and waits for every node to be. The abort record is watched from
   * the start: a signal or a failure on another node while the nodes gather or while ranks are
   * being started ends the attempt at once. False when the attempt ends here.
   */
  private async gather(): Promise<boolean> {
    const { client, keys, opts } = this;
    const aborted = client.wait([keys.abort]).then(async () => {
      const raw = await client.getText(keys.abort);
      this.onAbort(JSON.parse(raw ?? "{}") as AbortRecord);
    });
    aborted.catch(() => {/* the store closed: handled below */});
    try {
      await client.set(keys.nodeReady(this.node), "1");
      await Promise.race([
        client.wait(this.nodes.map(keys.nodeReady), opts.rdzvTimeoutS * 1000),
        aborted,
      ]);
      return true;
    } catch (e) {
      if (this.stopping || this.abortRequested) return false;
      this.finish({
        ok: false,
        abort: {
          reason: "node-lost",
          node: this.node,
          code: 1,
          detail: `attempt ${this.attempt} could not start: ${(e as Error).message}`,
          graceMs: 0,
        },
      });
      return false;
    }
  }

  /** Stage 2: this node's ranks, one event-loop turn apart (signals and the store are heard between). */
  private async spawnRanks(): Promise<void> {
    const { opts, ctx } = this;
    for (let local = 0; local < opts.nproc; local++) {
      // A signal or an abort stops the loop between two ranks (their handlers run in the yield).
      if (this.stopping || this.abortRequested) break;
      const rank = this.node * opts.nproc + local;
      let p: RankProcess;
      try {
        p = new RankProcess({
          rank,
          script: ctx.script,
          scriptArgs: opts.scriptArgs,
          env: { ...this.rankEnvOf(rank, local), ...profileClock() },
          logPath: join(ctx.runDir, `rank-${rank}.log`),
          logRanks: opts.logRanks,
          v8Flags: ctx.v8Flags,
        });
      } catch (e) {
        this.requestAbort({
          reason: "launch-error",
          node: this.node,
          rank,
          code: 1,
          detail: `cannot start rank ${rank}: ${(e as Error).message}`,
          graceMs: FAILURE_GRACE_MS,
        });
        break;
      }
      this.ranks.push(p);
      p.exited.then((exit) => this.onRankExit(p, exit));
      // One turn of the event loop (signals, the store) between spawns: setImmediate takes a few
      // microseconds, a setTimeout(0) waits for the timer clock's next millisecond.
      await new Promise((r) => setImmediate(r));
    }
  }

  /** The environment of global rank `rank` (local rank `local`): the launcher-rank contract. */
  private rankEnvOf(rank: number, local: number): Record<string, string> {
    const { opts, ctx } = this;
    const env = rankEnv({
      world: {
        rank,
        localRank: local,
        worldSize: this.worldSize,
        localWorldSize: opts.nproc,
        groupRank: this.node,
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
      restartCount: this.attempt,
      logRanks: opts.logRanks,
      launcherPid: Deno.pid,
      device: opts.device,
      resume: opts.resume,
      allowConfigChange: opts.allowConfigChange,
    });
    if (ctx.plan) Object.assign(env, rankDeviceEnv(ctx.plan, local, Deno.hostname()));
    return env;
  }

  /** Every node: what only this node sees of its ranks (pages, process states), to the store for node 0. */
  private forwardView(): void {
    this.stopForwarding = forwardNodeView({
      client: this.client,
      key: this.keys.nodeView(this.node),
      node: this.node,
      runDir: this.ctx.runDir,
      ranks: () => this.ranks,
      processStates: () => this.processStates(),
    });
  }

  private announceStarted(): void {
    const { ranks } = this;
    this.log.info(
      `attempt ${this.attempt}: started ranks ${
        rankList(ranks.map((p) => p.rank))
      } of ${this.worldSize} on node ${this.node} ` +
        `(pids ${ranks.map((p) => p.pid).join(",")}; ${this.ctx.threads} native thread(s) each)`,
    );
  }

  /**
   * Stage 3, every node: the attempt succeeds when every node's ranks are done; losing the store
   * (node 0's launcher gone) stops this node's ranks.
   */
  private watchEnd(): void {
    const { client, keys, opts } = this;
    client.wait(this.nodes.map(keys.nodeDone)).then(async () => {
      if (this.stopping) return;
      await this.drainOutput();
      await client.set(keys.nodeStopped(this.node), "1").catch(() => {});
      this.finish({ ok: true });
    }).catch(() => {});
    client.closed.then((info) => {
      if (info.byClient || this.finished) return;
      this.abortRequested = true;
      this.onAbort({
        reason: "node-lost",
        node: this.node,
        code: 1,
        detail:
          `lost the control store at ${opts.masterAddr}:${this.ctx.masterPort} (${info.reason}); node 0's launcher is gone`,
        graceMs: FAILURE_GRACE_MS,
      });
    });
  }

  /** Stage 3, node 0: the hang table once per hang, a failure past --timeout, node heartbeats. */
  private async watchHangsAndNodes(): Promise<void> {
    let reported: string | null = null;
    while (!this.finished && !this.stopping) {
      await sleep(POLL_MS);
      if (this.finished || this.stopping) return;
      let current: RankView[];
      try {
        current = await this.views();
      } catch {
        return;
      }
      const hang = findHang(
        current,
        this.worldSize,
        Math.min(this.opts.hangWarnS, this.opts.timeoutS),
        this.stateOf(this.processStates()),
        this.remote.silentNodes(current),
      );
      if (hang && hang.waitS >= this.opts.timeoutS) return await this.hangTimedOut(hang, current);
      if (hang && hang.waitS >= this.opts.hangWarnS && hang.signature !== reported) {
        reported = hang.signature;
        this.log.info(`hang: ${hang.sentence}\n${this.table(current)}`);
      } else if (!hang) {
        reported = null;
      }
      await this.checkNodeBeats();
    }
  }

  /** The rank table of `views`, with each of this node's ranks' process state now. */
  private table(views: RankView[]): string {
    return rankTable(views, {
      worldSize: this.worldSize,
      nproc: this.opts.nproc,
      processState: this.stateOf(this.processStates()),
    });
  }

  /** A collective waited past --timeout: the run fails with the hang's table. */
  private async hangTimedOut(
    hang: NonNullable<ReturnType<typeof findHang>>,
    views: RankView[],
  ): Promise<void> {
    const table = this.table(views);
    await this.requestAbort({
      reason: "timeout",
      node: this.node,
      code: TIMEOUT_EXIT_CODE,
      detail: `timeout: a collective waited ${
        seconds(hang.waitS)
      } (--timeout ${this.opts.timeoutS} s); stopping every rank`,
      graceMs: FAILURE_GRACE_MS,
      table: `${hang.sentence}\n${table}`,
    });
  }

  /** Another node's launcher silent for NODE_SILENT_MS is lost. */
  private async checkNodeBeats(): Promise<void> {
    for (const n of this.nodes.slice(1)) {
      const beat = await this.client.list(runKeys.nodeBeat(n)).catch(() => []);
      if (beat[0] && beat[0].ageMs > NODE_SILENT_MS) {
        this.nodeLost(
          n,
          `its launcher has not been heard from for ${seconds(beat[0].ageMs / 1000)}`,
        );
      }
    }
  }

  /**
   * A rank exited: zero may complete this node; non-zero finds the attempt's first real failure
   * (which may be another rank's: this one may only have seen a peer close its group) and has
   * every rank stopped.
   */
  private async onRankExit(p: RankProcess, exit: RankExit): Promise<void> {
    if (this.stopping || this.abortRequested) return;
    if (exit.code === 0) {
      if (this.ranks.every((q) => q.exit?.code === 0)) {
        await this.client.set(this.keys.nodeDone(this.node), "1").catch(() => {});
      }
      return;
    }
    this.failedExits.push({ rank: p.rank, order: this.failedExits.length });
    const first = await this.settledCause();
    if (first === null) return;
    const mine = this.ranks.find((q) => q.rank === first.rank);
    let firstExit = mine?.exit ?? null;
    if (mine && !firstExit) {
      // It reported its failure and is exiting: its exit code is what the launcher exits with.
      firstExit = await Promise.race([mine.exited, sleep(CAUSE_EXIT_WAIT_MS).then(() => null)]);
    }
    if (mine) await Promise.race([mine.outputDone, sleep(OUTPUT_DRAIN_MS)]);
    if (this.stopping || this.abortRequested) return;
    await this.requestAbort(this.failureAbort(first, mine, firstExit));
  }

  /**
   * The first failure of the attempt, waited for while only a consequence is known: the rank
   * behind it reported its error before closing its group, or is dying without a word (its exit
   * or another launcher's abort is moments away). Null when the attempt is stopping meanwhile.
   */
  private async settledCause(): Promise<ReturnType<typeof firstFailure> & object | null> {
    let notices: StoredNotice[] = [];
    const cause = async () => {
      try {
        notices = await this.readNotices();
      } catch { /* no store: judge from this node's exits and what was read before */ }
      return firstFailure(notices, this.failedExits)!;
    };
    let first = await cause();
    for (const until = Date.now() + PEER_SETTLE_MS; first.kind === "peer" && Date.now() < until;) {
      await sleep(PEER_POLL_MS);
      if (this.stopping || this.abortRequested) return null;
      first = await cause();
    }
    return first;
  }

  /** The abort record of a rank's failure: its exit code (124 for a timeout), its notice or output. */
  private failureAbort(
    first: NonNullable<ReturnType<typeof firstFailure>>,
    mine: RankProcess | undefined,
    firstExit: RankExit | null,
  ): AbortRecord {
    const notice = first.kind === "died" ? null : first.notice;
    const timedOut = first.kind === "timeout";
    const code = timedOut
      ? TIMEOUT_EXIT_CODE
      : firstExit && firstExit.code !== 0
      ? firstExit.code
      : 1;
    return {
      reason: timedOut ? "timeout" : "rank-failed",
      node: this.node,
      rank: first.rank,
      rankNode: Math.floor(first.rank / this.opts.nproc),
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
    };
  }

  /** Writes the abort record unless another launcher already did. */
  private async requestAbort(rec: AbortRecord): Promise<void> {
    if (this.abortRequested || this.finished) return;
    this.abortRequested = true;
    try {
      if (await this.client.add(this.keys.abortTicket, 1) === 1) {
        await this.client.set(this.keys.abort, JSON.stringify(rec));
      }
    } catch (e) {
      // The store is gone: stop this node's ranks on our own.
      this.onAbort({
        ...rec,
        detail: `${rec.detail} (and the control store is unreachable: ${(e as Error).message})`,
      });
    }
  }

  /**
   * The abort record arrived (or the store is gone): what every rank was doing is read first, then
   * this node's ranks are stopped (SIGTERM, SIGKILL after the record's grace), and the failure is
   * reported with the rank table, each rank's exit and the other ranks' own errors.
   */
  private async onAbort(rec: AbortRecord): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    const { before, notices, failedIn } = await this.snapshotBeforeStop();
    const statesBefore = this.processStates();
    const signalled = rec.reason === "signal" && this.forwarded;
    const exits = await Promise.all(
      this.ranks.map((p) => p.stop(rec.graceMs, { alreadySignalled: signalled })),
    );
    await this.drainOutput();
    const exitText = new Map(this.ranks.map((p, i) => [p.rank, describeExit(exits[i]!)]));
    const table = before
      ? rankTable(before, {
        worldSize: this.worldSize,
        nproc: this.opts.nproc,
        exits: exitText,
        processState: this.stateOf(statesBefore),
        failedIn,
      })
      : "(unknown: the control store is unreachable)";
    this.log.info(failureSummary(rec, table) + otherFailures(rec, notices));
    this.log.info(
      `node ${this.node}'s ranks ended: ${
        this.ranks.map((p, i) => `rank ${p.rank} ${describeExit(exits[i]!)}`).join(", ")
      }`,
    );
    this.client.set(this.keys.nodeStopped(this.node), "1").catch(() => {});
    this.finish({ ok: false, abort: { ...rec, detail: this.whatHappened(rec, exits) } });
  }

  /** Every rank's state and the failure notices, read before the ranks are stopped. */
  private async snapshotBeforeStop(): Promise<{
    before: RankView[] | null;
    notices: StoredNotice[];
    failedIn: Map<number, number>;
  }> {
    let before: RankView[] | null = null;
    const failedIn = new Map<number, number>();
    let notices: StoredNotice[] = [];
    try {
      before = await this.views();
      notices = await this.readNotices();
      for (const { notice } of notices) {
        if (notice.collective) failedIn.set(notice.rank, notice.collective.seq);
      }
    } catch { /* the store is gone: nobody can say what the other ranks were doing */ }
    return { before, notices, failedIn };
  }

  /** Each of this node's ranks' last output, waited for briefly. */
  private async drainOutput(): Promise<void> {
    await Promise.race([Promise.all(this.ranks.map((p) => p.outputDone)), sleep(OUTPUT_DRAIN_MS)]);
  }

  /** The attempt is over on this node: its shared-memory segments go, and the result settles. */
  private finish(r: AttemptResult): void {
    if (this.finished) return;
    this.finished = true;
    this.stopForwarding?.();
    // Every local rank has ended: nothing can attach to this attempt's segments any more.
    const { failed } = removeAttemptSegments(this.ctx.runId, this.attempt);
    if (failed.length > 0) {
      this.log.info(
        `could not remove shared-memory segment(s) of attempt ${this.attempt}: ${
          failed.join("; ")
        }`,
      );
    }
    this.resolveResult(r);
  }

  /** The /proc state letter ("T": stopped by a signal) of each of this node's running ranks, now. */
  private processStates(): Map<number, string> {
    const out = new Map<number, string>();
    for (const p of this.ranks) {
      if (p.exit) continue;
      try {
        const stat = Deno.readTextFileSync(`/proc/${p.pid}/stat`);
        out.set(p.rank, stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3));
      } catch { /* gone */ }
    }
    return out;
  }

  private stateOf(states: Map<number, string>) {
    return (rank: number, pid: number) =>
      this.ranks.some((p) => p.rank === rank && p.pid === pid)
        ? states.get(rank) ?? null
        : this.remote.processState(rank, pid);
  }

  /**
   * Each rank's latest state: its store record, or its state page when this node's rank wrote the
   * page more recently (a rank that blocks in a collective from a loop without `await` has written
   * that collective's entry to its page, while its store record may still wait in the writer).
   */
  private async views(): Promise<RankView[]> {
    const stored = (await this.client.list(this.keys.rankStatePrefix)).map(toRankView).filter((
      v,
    ): v is RankView => v !== null);
    const byRank = new Map(stored.map((v) => [v.rank, v]));
    for (const p of this.ranks) {
      if (p.exit) continue;
      const page = readStatePage(statePagePath(this.ctx.runDir, p.rank));
      const view = page && toRankView({ key: "", ...page });
      if (!view || view.rank !== p.rank || view.pid !== p.pid) continue;
      const known = byRank.get(p.rank);
      if (!known || view.heardS <= known.heardS) byRank.set(p.rank, view);
    }
    if (this.opts.nnodes > 1) {
      this.remote.update(await this.client.list(this.keys.nodeViewPrefix));
      this.remote.merge(byRank);
    }
    return [...byRank.values()].sort((a, b) => a.rank - b.rank);
  }

  /** Every failure notice of this attempt, with its age by the store's clock. */
  private async readNotices(): Promise<StoredNotice[]> {
    return (await this.client.list(this.keys.rankStatePrefix)).flatMap((e) => {
      const notice = e.key.endsWith("/failure") ? toFailureNotice(e.value) : null;
      return notice ? [{ notice, ageMs: e.ageMs }] : [];
    });
  }

  /**
   * The record's account of a stop: the first reason, then what really happened to this node's
   * ranks — a second signal that killed them at once, or ranks killed when their grace ran out.
   */
  private whatHappened(rec: AbortRecord, exits: RankExit[]): string {
    if (this.escalation) return `${rec.detail}; ${this.escalation}`;
    if (rec.reason !== "signal") return rec.detail;
    const killed = this.ranks.filter((_, i) => exits[i]!.signal === "SIGKILL").map((p) => p.rank);
    return killed.length === 0
      ? `${rec.detail}; every rank of node ${this.node} exited within it`
      : `${rec.detail}; rank(s) ${rankList(killed)} did not exit within ${
        seconds(rec.graceMs / 1000)
      } and were killed (SIGKILL)`;
  }

  // The handle: how the launcher reaches the running attempt.

  signal(sig: Deno.Signal): void {
    const { log, node, opts } = this;
    this.signalsSeen++;
    if (this.signalsSeen > 1) {
      const after = seconds((performance.now() - this.firstSignalAt) / 1000);
      log.info(
        `second stop signal (${sig}, ${after} after the first): killing every rank of node ${node} now`,
      );
      this.escalation ??=
        `then a second signal (${sig}) ${after} later killed every rank of node ${node} at once (SIGKILL), before its grace ended`;
      for (const p of this.ranks) p.signal("SIGKILL");
      return;
    }
    this.firstSignalAt = performance.now();
    // The ranks stop on SIGINT or SIGTERM (the Trainer, stopRequested()); any other stop signal
    // reaches them as SIGTERM.
    const forwardAs: Deno.Signal = sig === "SIGINT" ? "SIGINT" : "SIGTERM";
    log.info(
      `received ${sig}: forwarding ${
        forwardAs === sig ? "it" : forwardAs
      } to the ranks, which have ${opts.graceS} s to save and exit (send it again to kill them now)`,
    );
    this.forwarded = true;
    for (const p of this.ranks) p.signal(forwardAs);
    this.requestAbort({
      reason: "signal",
      node,
      signal: sig,
      code: signalExitCode(sig),
      detail:
        `node ${node}'s launcher received ${sig}; ranks got ${opts.graceS} s to save and exit`,
      graceMs: opts.graceS * 1000,
    });
  }

  nodeLost(n: number, why: string): void {
    this.requestAbort({
      reason: "node-lost",
      node: this.node,
      code: 1,
      detail: `node ${n} is lost: ${why}; stopping every rank`,
      graceMs: FAILURE_GRACE_MS,
    });
  }

  launchError(detail: string): void {
    this.requestAbort({
      reason: "launch-error",
      node: this.node,
      code: 1,
      detail,
      graceMs: FAILURE_GRACE_MS,
    });
  }
}

/** Starts attempt `k` on this node; the handle's result settles when it is over here. */
export function startAttempt(ctx: RunContext, k: number): AttemptHandle {
  return new Attempt(ctx, k);
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
  const loadedCpu = markedCpuAt(LAUNCHER_LOADED);
  return {
    DTRAIN_LAUNCH_MS: String(performance.timeOrigin),
    ...(loaded !== undefined
      ? { DTRAIN_LAUNCHER_LOADED_MS: String(performance.timeOrigin + loaded) }
      : {}),
    DTRAIN_SPAWN_MS: String(performance.timeOrigin + performance.now()),
    // the launcher's CPU time (ms) to its modules loaded, and to this spawn
    ...(loadedCpu !== undefined ? { DTRAIN_LAUNCHER_CPU_MS: `${loadedCpu},${cpuNowMs()}` } : {}),
  };
}
