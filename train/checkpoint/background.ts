/**
 * The asynchronous half of an async checkpoint save: one worker thread per
 * manager commits one encoded checkpoint at a time; this side runs the
 * saved-hooks once the commit is durable, keeps the process alive while a
 * commit is in flight, and waits for it on exit, so none is silently lost.
 */
import { STOP_SIGNALS } from "../../os/stop_signals.ts";
import type { Worker } from "node:worker_threads";
import { nodeWorkerThreads } from "../../os/node_builtin.ts";
import { workerModuleUrl } from "../../os/install_layout.ts";
import {
  ANSWER,
  type CommitFailure,
  type CommitJob,
  readAnswer,
  STATE,
} from "./commit_protocol.ts";
import type { RotationPolicy } from "./rotation.ts";
import type { EncodedCheckpoint } from "./save.ts";

/** How often a blocked wait says it is still waiting. */
const STILL_WAITING_MS = 10_000;

interface InFlight {
  step: number;
  dir: string;
  sab: SharedArrayBuffer;
  /** the saved-hooks ran and the worker was told to rotate */
  hooksRun: boolean;
}

/** What the committer needs from its manager. */
export interface CommitterHost {
  root: string;
  fsync: boolean;
  policy: RotationPolicy;
  warn: (message: string) => void;
  /** the manager's saved-hooks, run once a commit is durable (before rotation) */
  committed: (dir: string, step: number) => void;
}

/** Committers with a commit in flight or an error nobody was told of yet; the exit handler settles them. */
const open = new Set<BackgroundCommitter>();
let exitHandlerInstalled = false;

/**
 * Settles every commit still in flight (blocking) and reports errors nobody
 * was told of yet; returns them. Exit paths call it (`Deno.exit()` included,
 * through the `unload` event), as may tools that exit on their own.
 */
export function settleAllCommits(): Error[] {
  const errors: Error[] = [];
  for (const c of [...open]) {
    c.settle();
    const e = c.takeError();
    if (e) errors.push(e);
  }
  return errors;
}

const signalHandlers = new Map<Deno.Signal, () => void>();

/**
 * While a commit is in flight, a stop signal (SIGTERM, SIGINT, SIGHUP, …: os/stop_signals.ts) first finishes it (a signal's
 * default action ends the process without the `unload` event), then the
 * signal is raised again: with no other listener it ends the process as it
 * would have; a Trainer's listener sees a second stop request, which it
 * ignores. Not installed while idle, so the default action is untouched.
 */
function watchStopSignals(on: boolean): void {
  if (Deno.build.os === "windows" || on === (signalHandlers.size > 0)) return;
  if (!on) {
    for (const [sig, fn] of signalHandlers) Deno.removeSignalListener(sig, fn);
    signalHandlers.clear();
    return;
  }
  for (const sig of STOP_SIGNALS) {
    const fn = () => {
      watchStopSignals(false);
      for (const c of [...open]) {
        c.settle();
        const e = c.peekError();
        if (e) console.error(`[dtrain] on ${sig}: ${e.message}`);
      }
      Deno.kill(Deno.pid, sig);
    };
    signalHandlers.set(sig, fn);
    Deno.addSignalListener(sig, fn);
  }
}

/** Installs or removes the signal watch to match whether any commit is in flight. */
function updateSignalWatch(): void {
  watchStopSignals([...open].some((c) => c.busy));
}

function installExitHandler(): void {
  if (exitHandlerInstalled) return;
  exitHandlerInstalled = true;
  globalThis.addEventListener("unload", () => {
    for (const e of settleAllCommits()) {
      console.error(`[dtrain] ${e.message}`);
      Deno.exitCode = 1;
    }
  });
}

/** Runs encoded checkpoints' commits on a worker thread, at most one at a time. */
export class BackgroundCommitter {
  readonly #host: CommitterHost;
  #worker: Worker | null = null;
  #inFlight: InFlight | null = null;
  #error: Error | null = null;

  constructor(host: CommitterHost) {
    this.#host = host;
  }

  /**
   * Starts the worker thread now rather than at the first commit: creating
   * it blocks this thread for tens of milliseconds (a JS runtime of its own),
   * which belongs to start-up, not to a training step.
   */
  prestart(): void {
    this.#ensureWorker();
  }

  /** True while a commit has not been settled. */
  get busy(): boolean {
    return this.#inFlight !== null;
  }

  /**
   * Hands `encoded` to the worker (its buffers are transferred: the caller
   * must not use them again). The previous commit must be settled.
   */
  start(encoded: EncodedCheckpoint, dir: string): void {
    if (this.#inFlight !== null) throw new Error("BackgroundCommitter: a commit is in flight");
    const sab = new SharedArrayBuffer(ANSWER.HEADER_BYTES + ANSWER.MAX_BYTES);
    const worker = this.#ensureWorker();
    const files = encoded.files.map((f) => ({
      name: f.name,
      // Transferable only when the view owns its whole buffer.
      bytes: f.bytes.byteOffset === 0 && f.bytes.byteLength === f.bytes.buffer.byteLength
        ? f.bytes
        : f.bytes.slice(),
    }));
    const job: CommitJob = {
      kind: "commit",
      root: this.#host.root,
      fsync: this.#host.fsync,
      step: encoded.step,
      files,
      policy: this.#host.policy,
      sab,
    };
    this.#inFlight = { step: encoded.step, dir, sab, hooksRun: false };
    open.add(this);
    installExitHandler();
    updateSignalWatch();
    worker.ref(); // a script that returns keeps its process until the commit is durable
    worker.postMessage(job, files.map((f) => f.bytes.buffer as ArrayBuffer));
  }

  /** Blocks until the commit in flight (if any) is committed and rotated, or failed; never throws. */
  settle(): void {
    const f = this.#inFlight;
    if (f === null) return;
    let state = this.#waitWhile(f, STATE.PENDING);
    if (state === STATE.COMMITTED) {
      this.#afterCommit(f);
      state = this.#waitWhile(f, STATE.COMMITTED);
    }
    this.#finish(f);
  }

  /** The failure of a settled commit nobody was told of yet (kept), or null. */
  peekError(): Error | null {
    return this.#error;
  }

  /** The failure of a settled commit nobody was told of yet (then forgotten), or null. */
  takeError(): Error | null {
    const e = this.#error;
    this.#error = null;
    if (this.#inFlight === null) open.delete(this);
    return e;
  }

  /** Settles what is in flight and ends the worker; returns the untold failure, if any. */
  close(): Error | null {
    this.settle();
    this.#worker?.terminate();
    this.#worker = null;
    return this.takeError();
  }

  #ensureWorker(): Worker {
    if (this.#worker !== null) return this.#worker;
    const url = workerModuleUrl("checkpointCommit", new URL("./commit_worker.ts", import.meta.url));
    // node:worker_threads for unref(): an idle committer must not keep its process alive.
    const worker = new (nodeWorkerThreads().Worker)(url);
    worker.unref();
    worker.on("message", (msg: string) => {
      const f = this.#inFlight;
      if (f === null) return; // already settled synchronously
      if (msg === "committed") this.#afterCommit(f);
      else this.#finish(f);
    });
    worker.on("error", (e: Error) => {
      // The thread itself died (not a failed commit, which it answers): whatever it held is lost.
      const f = this.#inFlight;
      this.#worker = null;
      if (f !== null && Atomics.load(new Int32Array(f.sab, 0, 2), ANSWER.STATE) === STATE.PENDING) {
        this.#inFlight = null;
        updateSignalWatch();
        this.#error = new Error(
          `Cannot save checkpoint step ${f.step} (${f.dir}): the background commit thread died: ` +
            `${e.message}. The previous checkpoint and latest are as they were.`,
          { cause: e },
        );
      }
    });
    this.#worker = worker;
    return worker;
  }

  /** Waits (blocking) while the answer's state is `state`; returns the new state. */
  #waitWhile(f: InFlight, state: number): number {
    const head = new Int32Array(f.sab, 0, 2);
    const started = Date.now();
    let told = started;
    while (Atomics.load(head, ANSWER.STATE) === state) {
      Atomics.wait(head, ANSWER.STATE, state, 1000);
      if (Date.now() - told >= STILL_WAITING_MS) {
        told = Date.now();
        const s = ((told - started) / 1000).toFixed(0);
        this.#host.warn(`Still waiting for checkpoint ${f.dir} to be written (${s} s)`);
      }
    }
    return Atomics.load(head, ANSWER.STATE);
  }

  /** Durable: report warnings, run the saved-hooks, then let the worker rotate. */
  #afterCommit(f: InFlight): void {
    const state = Atomics.load(new Int32Array(f.sab, 0, 2), ANSWER.STATE);
    if (f.hooksRun || state !== STATE.COMMITTED) return; // a wakeup of an earlier commit
    f.hooksRun = true;
    const answer = readAnswer(f.sab);
    for (const w of answer.warnings) this.#host.warn(w);
    try {
      this.#host.committed(answer.dir ?? f.dir, f.step);
    } catch (e) {
      this.#error ??= new Error(
        `Checkpoint ${f.dir} was saved, but a checkpoint-saved hook failed: ${
          (e as Error).message
        }`,
        { cause: e },
      );
    } finally {
      this.#worker?.postMessage({ kind: "rotate" });
    }
  }

  /** Done or failed: report what the worker said, forget the commit. */
  #finish(f: InFlight): void {
    if (this.#inFlight !== f) return;
    const state = Atomics.load(new Int32Array(f.sab, 0, 2), ANSWER.STATE);
    if (state !== STATE.DONE && state !== STATE.FAILED) return; // a wakeup that raced a sync settle
    this.#inFlight = null;
    this.#worker?.unref();
    const answer = readAnswer(f.sab);
    for (const w of answer.warnings) this.#host.warn(w);
    if (state === STATE.FAILED) this.#error ??= asyncFailure(answer.error!, f.step);
    if (this.#error === null) open.delete(this);
    updateSignalWatch();
  }
}

/** The worker's failure as an Error for the caller of the next save/wait/close. */
function asyncFailure(failure: CommitFailure, step: number): Error {
  let cause: Error | undefined;
  if (failure.cause) {
    cause = Object.assign(new Error(failure.cause.message), {
      name: failure.cause.name,
      ...(failure.cause.code ? { code: failure.cause.code } : {}),
    });
  }
  return new Error(
    `${failure.message} (The save of step ${step} was written in the background; ` +
      "its failure is reported at the next save, wait or close.)",
    { cause },
  );
}
