/**
 * What each rank publishes about itself in the control store (phase, last collective and whether
 * it is inside it, heartbeat, failure notice) and how a launcher reads it back. Durations use the
 * rank's own clock plus the store's age of the record, so clocks of different machines never mix.
 */
import type { CollectiveRecord, PhaseSink } from "./phase.ts";
import type { StoreClient, StoreEntry } from "./store.ts";
import { FAILURE_KINDS, type FailureKind } from "./failure_kind.ts";
import type { StatePage } from "./state_page.ts";

/** The record a rank writes to `rankState(r)` (JSON). */
export interface RankState {
  rank: number;
  host: string;
  pid: number;
  phase: string;
  /** rank clock (ms) when the phase began */
  phaseAt: number;
  /** a library per-step phase (forward, allreduce, …), not one the user named */
  phaseFrequent?: boolean;
  coll: CollectiveRecord | null;
  /** true between a collective's "enter" and "exit" */
  inColl: boolean;
  /** rank clock (ms) of the last collective enter/exit */
  collAt: number;
  /** "running", or "exited" once the process is ending normally */
  status: "running" | "exited";
  /** rank clock (ms) when this record was written */
  sentAt: number;
}

/** Written by a rank that fails, before it closes anything or exits (JSON at `rankFailure(r)`). */
export interface FailureNotice {
  rank: number;
  host: string;
  pid: number;
  /** its own error, a timeout, or a consequence of another rank's failure */
  kind: FailureKind;
  /** the rank's clock (ms) when it failed */
  at: number;
  message: string;
  stack: string;
  /** the collective whose call failed, when the error is that call's */
  collective?: { seq: number; op: string };
}

/** A rank's state as seen by a launcher now. */
export interface RankView {
  rank: number;
  host: string;
  pid: number;
  phase: string;
  /** the phase is one of the library's per-step phases */
  phaseFrequent: boolean;
  /** seconds in the current phase */
  phaseS: number;
  coll: CollectiveRecord | null;
  inColl: boolean;
  /** seconds since the last collective enter (while inColl) or exit */
  collS: number;
  /** seconds since the rank last wrote its record */
  heardS: number;
  status: RankState["status"];
}

/** How often a rank refreshes its record even when nothing changed. */
export const HEARTBEAT_MS = 1000;
/** Longest delay of a frequent phase change or a collective exit before it is published. */
const FLUSH_MS = 100;

/** A number as JSON writes it. */
function num(n: number): string {
  return Number.isFinite(n) ? String(n) : "null";
}

/**
 * A PhaseSink that publishes every phase change and collective enter/exit
 * of this rank to the store as a RankState, without waiting for answers
 * (records leave synchronously, so they are out before any blocking call).
 * A training step changes phase and enters and leaves collectives many times:
 * the record is written from JSON pieces kept between changes (the rank's
 * identity once, a phase's or collective's name when it changes), not an
 * object copied and serialised whole at each one.
 */
export class StorePhaseSink implements PhaseSink {
  readonly #store: StoreClient;
  readonly #key: string;
  /** `{"rank":…,"host":…,"pid":…,` */
  readonly #head: string;
  #phase: string;
  #phaseAt: number;
  #phaseFrequent: boolean | undefined = undefined;
  /** `"phase":…,"phaseAt":…[,"phaseFrequent":…]`, or "" once the phase changed */
  #phaseJson = "";
  /** the last collective's sequence number (0: none yet) and payload */
  #collSeq = 0;
  #collBytes = 0;
  /** `"op":…[,"detail":…]` of the last collective, and the op and detail it was made of */
  #collNames = "";
  #collOp = "";
  #collDetail: string | undefined = undefined;
  #inColl = false;
  #collAt = 0;
  #status: RankState["status"] = "running";
  /** when the store record was last written */
  #sentAt = 0;
  #timer: ReturnType<typeof setInterval> | undefined;
  #flush: ReturnType<typeof setTimeout> | undefined;
  readonly #page: StatePage | null;

  /**
   * `page`: this rank's state page, rewritten synchronously at every collective enter and exit so
   * the launcher learns the collective a rank blocks in even when the store record never leaves.
   */
  constructor(
    store: StoreClient,
    key: string,
    init: { rank: number; host: string; pid: number; phase: string; phaseAt: number },
    page: StatePage | null = null,
  ) {
    this.#store = store;
    this.#key = key;
    this.#page = page;
    this.#head = `{"rank":${num(init.rank)},"host":${JSON.stringify(init.host)},"pid":${
      num(init.pid)
    },`;
    this.#phase = init.phase;
    this.#phaseAt = init.phaseAt;
  }

  phase(name: string, sinceMs: number, frequent = false): void {
    this.#phase = name;
    this.#phaseAt = sinceMs;
    this.#phaseFrequent = frequent;
    this.#phaseJson = "";
    if (frequent) this.#soon();
    else this.publish();
  }

  /**
   * A barrier's enter is published at once (ranks wait there for others'
   * slow work); other collectives, which a training step runs many times a
   * second, within FLUSH_MS. A rank blocked in one before it was reported
   * stops its heartbeat: the launcher's hang check reads that silence as
   * "blocked in the collective after its last report" (launch/hang_report.ts).
   */
  collective(rec: CollectiveRecord, state: "enter" | "exit"): void {
    // the record's fields now (the caller may reuse its object)
    this.#collSeq = rec.seq;
    this.#collBytes = rec.bytes;
    if (rec.op !== this.#collOp || rec.detail !== this.#collDetail || this.#collNames === "") {
      this.#collOp = rec.op;
      this.#collDetail = rec.detail;
      this.#collNames = `"op":${JSON.stringify(rec.op)}` +
        (rec.detail === undefined ? "" : `,"detail":${JSON.stringify(rec.detail)}`);
    }
    this.#inColl = state === "enter";
    this.#collAt = Date.now();
    if (state === "enter" && rec.op === "barrier") return this.publish();
    // The page's record carries its own write time; `sentAt` stays the store record's (#soon).
    this.#page?.write(this.#json(this.#collAt));
    this.#soon();
  }

  /** The RankState record (JSON) as of now, written at `sentAt`. */
  #json(sentAt: number): string {
    if (this.#phaseJson === "") {
      this.#phaseJson = `"phase":${JSON.stringify(this.#phase)},"phaseAt":${num(this.#phaseAt)}` +
        (this.#phaseFrequent === undefined ? "" : `,"phaseFrequent":${this.#phaseFrequent}`);
    }
    const coll = this.#collNames === ""
      ? "null"
      : `{"seq":${num(this.#collSeq)},${this.#collNames},"bytes":${num(this.#collBytes)}}`;
    return `${this.#head}${this.#phaseJson},"coll":${coll},"inColl":${this.#inColl},"collAt":${
      num(this.#collAt)
    },"status":"${this.#status}","sentAt":${num(sentAt)}}`;
  }

  /** Publishes within FLUSH_MS (at once when the last record is older). */
  #soon(): void {
    if (Date.now() - this.#sentAt >= FLUSH_MS) return this.publish();
    if (this.#flush !== undefined) return;
    this.#flush = setTimeout(() => {
      this.#flush = undefined;
      this.publish();
    }, FLUSH_MS);
    Deno.unrefTimer(this.#flush);
  }

  /** Marks the rank as ending normally (sent from the unload event). */
  exiting(): void {
    this.#status = "exited";
    this.#inColl = false;
    this.publish();
  }

  /** Writes the record now. */
  publish(): void {
    if (this.#flush !== undefined) {
      clearTimeout(this.#flush);
      this.#flush = undefined;
    }
    this.#sentAt = Date.now();
    const json = this.#json(this.#sentAt);
    this.#page?.write(json);
    this.#store.post(this.#key, json);
  }

  /** Sends the latest state now if a change is waiting to be sent (PhaseSink.flush). */
  flush(): void {
    if (this.#flush !== undefined) this.publish();
  }

  /** Re-publishes every HEARTBEAT_MS without keeping the process alive. */
  startHeartbeat(): void {
    this.stopHeartbeat();
    const timer = setInterval(() => this.publish(), HEARTBEAT_MS);
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  stopHeartbeat(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null;
}

/** Parses one rank state entry of a `list()`; null when it is not a valid record. */
export function toRankView(entry: StoreEntry): RankView | null {
  let s: unknown;
  try {
    s = JSON.parse(new TextDecoder().decode(entry.value));
  } catch {
    return null;
  }
  if (!isObject(s)) return null;
  const num = (k: string) =>
    typeof s[k] === "number" && Number.isFinite(s[k]) ? s[k] as number : null;
  const rank = num("rank"),
    pid = num("pid"),
    phaseAt = num("phaseAt"),
    collAt = num("collAt"),
    sentAt = num("sentAt");
  if (rank === null || pid === null || phaseAt === null || collAt === null || sentAt === null) {
    return null;
  }
  if (typeof s.phase !== "string" || typeof s.host !== "string") return null;
  let coll: CollectiveRecord | null = null;
  if (isObject(s.coll) && typeof s.coll.seq === "number" && typeof s.coll.op === "string") {
    coll = {
      seq: s.coll.seq,
      op: s.coll.op,
      bytes: typeof s.coll.bytes === "number" ? s.coll.bytes : 0,
      ...(typeof s.coll.detail === "string" ? { detail: s.coll.detail } : {}),
    };
  }
  const age = entry.ageMs / 1000;
  return {
    rank,
    host: s.host,
    pid,
    phase: s.phase,
    phaseS: Math.max(0, (sentAt - phaseAt) / 1000 + age),
    phaseFrequent: s.phaseFrequent === true,
    coll,
    inColl: s.inColl === true && coll !== null,
    collS: Math.max(0, (sentAt - collAt) / 1000 + age),
    heardS: age,
    status: s.status === "exited" ? "exited" : "running",
  };
}

/** Parses a failure notice; null when absent or invalid. */
export function toFailureNotice(value: Uint8Array | null): FailureNotice | null {
  if (value === null) return null;
  try {
    const n = JSON.parse(new TextDecoder().decode(value));
    if (isObject(n) && typeof n.rank === "number" && typeof n.message === "string") {
      const kind = FAILURE_KINDS.includes(n.kind as FailureKind) ? n.kind as FailureKind : "error";
      return {
        rank: n.rank,
        host: String(n.host ?? ""),
        pid: typeof n.pid === "number" ? n.pid : 0,
        kind,
        at: typeof n.at === "number" ? n.at : 0,
        message: n.message,
        stack: String(n.stack ?? ""),
        ...(isObject(n.collective) && typeof n.collective.seq === "number" &&
            typeof n.collective.op === "string"
          ? { collective: { seq: n.collective.seq, op: n.collective.op } }
          : {}),
      };
    }
  } catch { /* fall through */ }
  return null;
}
