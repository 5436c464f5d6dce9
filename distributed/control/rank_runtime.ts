/**
 * What a rank's code uses to take part in a launched job: its world, the control store (which
 * launch/rank_main.ts connects before the script runs), named store barriers covered by the hang
 * diagnosis, rank-zero-first sections, phases, and the failure notice that tells the launcher why
 * this rank failed. Outside a launcher they serve a world of one.
 */
import { currentPhase, flushPhases, phase, reportCollective } from "./phase.ts";
import { getRankSettings, getWorld } from "./env.ts";
import { type StoreClient, StoreError } from "./store.ts";
import { type AttemptKeys, attemptKeys } from "./store_keys.ts";
import { type FailureNotice, toRankView } from "./rank_state.ts";
import { failedInCollective, failureKind, withFailureKind } from "./failure_kind.ts";

export { phase } from "./phase.ts";

let store: StoreClient | null = null;
let keys: AttemptKeys | null = null;
const barrierGenerations = new Map<string, number>();
let barrierSeq = 0;
let published: Promise<boolean> | null = null;

/** How long a failing rank waits for its failure notice to be stored. */
const NOTICE_TIMEOUT_MS = 2000;

/** Called once by launch/rank_main.ts after connecting; not for user code. */
export function installRankStore(client: StoreClient): void {
  store = client;
  keys = attemptKeys(getRankSettings().restartCount);
}

/**
 * The run's control store (for backend bootstrap data and the like). Keys
 * written through `storeKey()` are private to the current launch attempt.
 * Throws outside a dtrain launch.
 */
export function getStore(): StoreClient {
  if (!store) {
    throw new Error(
      "No dtrain control store in this process: it was not started by the dtrain launcher " +
        "(start it with `dtrain --nproc N script.ts`)",
    );
  }
  return store;
}

/**
 * A store key scoped to this launch attempt, so data from before a restart
 * is never read after it.
 *
 * @example
 * ```ts
 * await getStore().set(storeKey("nccl-id"), idBytes);
 * ```
 */
export function storeKey(name: string): string {
  if (!keys) getStore();
  return keys!.user(name);
}

/** Options of storeBarrier(). */
export interface StoreBarrierOptions {
  /** give up after this long (default: wait until the launcher's --timeout stops the run) */
  timeoutMs?: number;
}

/**
 * Waits until every rank has reached the barrier called `name`. While
 * waiting, the rank's phase is `barrier "name"` and it counts as inside a
 * collective, so the launcher's hang diagnosis names any rank that is
 * elsewhere. Barriers of the same name may be repeated: every rank must
 * pass them in the same order.
 *
 * @example
 * ```ts
 * phase("scan dataset");
 * if (getWorld().rank === 0) await buildIndex();
 * await storeBarrier("after-scan");
 * ```
 */
export async function storeBarrier(name: string, opts: StoreBarrierOptions = {}): Promise<void> {
  const { worldSize } = getWorld();
  const gen = (barrierGenerations.get(name) ?? 0) + 1;
  barrierGenerations.set(name, gen);
  const rec = { seq: ++barrierSeq, op: "barrier", bytes: 0, detail: name };
  const before = currentPhase().phase;
  phase(`barrier "${name}"`);
  reportCollective(rec, "enter");
  try {
    if (worldSize === 1) return;
    const client = getStore();
    const k = keys!;
    const arrived = await client.add(k.barrierCount(name, gen), 1);
    if (arrived === worldSize) {
      await client.set(k.barrierDone(name, gen), "1");
      // Everyone has left the previous generation, so its keys can go.
      if (gen > 1) await client.delete(k.barrierDone(name, gen - 1));
      await client.delete(k.barrierCount(name, gen));
    }
    try {
      await client.wait([k.barrierDone(name, gen)], opts.timeoutMs);
    } catch (e) {
      if (e instanceof StoreError && e.kind === "timeout") {
        throw await barrierTimeout(name, gen, opts.timeoutMs!);
      }
      throw e;
    }
  } finally {
    reportCollective(rec, "exit");
    phase(before);
  }
}

async function barrierTimeout(name: string, gen: number, timeoutMs: number): Promise<Error> {
  const client = getStore();
  const k = keys!;
  const count = Number(await client.getText(k.barrierCount(name, gen)) ?? 0);
  const views = (await client.list(k.rankStatePrefix)).map(toRankView).filter((v) => v !== null);
  // A rank whose last collective is this barrier arrived (it may have timed out and left already).
  const elsewhere = views
    .filter((v) => !(v.coll?.op === "barrier" && v.coll.detail === name))
    .map((v) => `rank ${v.rank} in phase "${v.phase}"`);
  return withFailureKind(
    new Error(
      `storeBarrier("${name}") timed out after ${timeoutMs} ms: ${count} of ${getWorld().worldSize} ranks arrived` +
        (elsewhere.length ? `; elsewhere: ${elsewhere.join(", ")}` : ""),
    ),
    "timeout",
    { inCollective: true },
  );
}

function describe(err: unknown): { message: string; stack: string } {
  if (err instanceof Error) {
    return { message: `${err.name}: ${err.message}`, stack: err.stack ?? "" };
  }
  return { message: `Uncaught non-Error value: ${String(err)}`, stack: "" };
}

/**
 * Tells the launcher why this rank is failing: stores a failure notice (the
 * error, its stack, its kind — own error, timeout, or a consequence of
 * another rank's failure — and the time) after this rank's latest phase.
 * Call it before closing the process group or anything else peers would
 * notice, so that their own failures read as consequences of this one. Only
 * the first call of a process publishes; later ones return the same promise.
 * Resolves to true once stored, false when it could not be (the store is
 * gone, or 2 s passed, or outside a launched job).
 *
 * @example
 * ```ts
 * try { await train(); } catch (e) { await publishFailure(e); pg.close(); throw e; }
 * ```
 */
export function publishFailure(err: unknown): Promise<boolean> {
  if (published) return published;
  if (!store || !keys) return Promise.resolve(false);
  flushPhases(); // the latest phase and collective, which may not have been sent yet
  const { rank } = getWorld();
  const { message, stack } = describe(err);
  const last = currentPhase().lastCollective;
  const notice: FailureNotice = {
    rank,
    host: Deno.hostname(),
    pid: Deno.pid,
    kind: failureKind(err),
    at: Date.now(),
    message,
    stack,
    ...(last && failedInCollective(err) ? { collective: { seq: last.seq, op: last.op } } : {}),
  };
  let timer: ReturnType<typeof setTimeout> | undefined;
  published = Promise.race([
    store.set(keys.rankFailure(rank), JSON.stringify(notice)).then(() => true, () => false),
    new Promise<boolean>((r) => timer = setTimeout(() => r(false), NOTICE_TIMEOUT_MS)),
  ]).finally(() => clearTimeout(timer));
  return published;
}

/** What rank 0 tells its launcher about the process group it made (run.json). */
export interface ProcessGroupReport {
  backend: string;
  worldSize: number;
  device: string;
}

/**
 * Tells the launcher which process group rank 0 made, for the run record;
 * does nothing on other ranks or outside a launched job. Does not wait. Sent
 * on the event loop's next turn: the store connection writes one record at
 * a time, and the phase a script sets right after making its group (then
 * perhaps blocking the event loop) must not queue behind this one.
 */
export function reportProcessGroup(report: ProcessGroupReport): void {
  if (!store || !keys || getWorld().rank !== 0) return;
  const [client, key] = [store, keys.processGroup];
  setTimeout(() => client.post(key, JSON.stringify(report)), 0);
}

/** What a resume adopted, as run.json records it in the attempt (`resumed`). */
export interface ResumeReport {
  /** the checkpoint's folder */
  checkpoint: string;
  step: number;
  /** the run id the checkpoint's state names ("" when it names none) */
  savedBy: string;
  /** each change of the training config since the checkpoint, "key saved → now" */
  configChanges: string[];
}

/** Rank 0: tells the launcher what this attempt resumed from (run.json); a no-op elsewhere. */
export function reportResume(report: ResumeReport): void {
  if (!store || !keys || getWorld().rank !== 0) return;
  const [client, key] = [store, keys.resume];
  setTimeout(() => client.post(key, JSON.stringify(report)), 0);
}

/**
 * Tells the launcher the numerics policy rank 0 now trains under, for the
 * run record (the latest report of an attempt is the one recorded); does
 * nothing on other ranks or outside a launched job. Does not wait.
 */
export function reportNumerics(policy: object): void {
  if (!store || !keys || getWorld().rank !== 0) return;
  const [client, key, text] = [store, keys.numerics, JSON.stringify(policy)];
  setTimeout(() => client.post(key, text), 0);
}

/**
 * Runs `fn` on rank 0 while every other rank waits at the barrier `name`,
 * then runs `fn` on the other ranks. Use it for work that one rank must do
 * first (download or preprocess a dataset) after which the others can use
 * the result (load the cached files). Every rank returns its own fn's result.
 * If fn throws on rank 0, that rank fails and the launcher stops the job.
 *
 * @example
 * ```ts
 * const index = await rankZeroFirst("prepare dataset", () => loadOrBuildIndex(dir));
 * ```
 */
export async function rankZeroFirst<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
  if (getWorld().rank === 0) {
    const result = await fn();
    await storeBarrier(name);
    return result;
  }
  await storeBarrier(name);
  return await fn();
}
