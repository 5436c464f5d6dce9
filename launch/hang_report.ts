/**
 * Hang diagnosis from the ranks' state records: finds ranks that have waited
 * in a collective or barrier longer than a threshold, names the ranks that
 * are elsewhere and what they are doing, and renders the table of every
 * rank's phase, time in it and last collective.
 */
import type { RankView } from "../distributed/control/rank_state.ts";

/** A detected hang: ranks stuck in one collective while others are elsewhere. */
export interface Hang {
  /** identifies this hang, so it is reported once rather than every poll */
  signature: string;
  /** the longest wait among the stuck ranks, seconds */
  waitS: number;
  /** one line: who waits where, and who is elsewhere doing what */
  sentence: string;
}

/** Formats seconds for people: `3.2 s`, `61 s`. */
export function seconds(s: number): string {
  return s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;
}

/** `1,2,3` or, for long runs, `0-63`. */
export function rankList(ranks: readonly number[]): string {
  const sorted = [...ranks].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length;) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    if (j - i >= 3) parts.push(`${sorted[i]}-${sorted[j]}`);
    else for (let k = i; k <= j; k++) parts.push(String(sorted[k]));
    i = j + 1;
  }
  return parts.join(",");
}

function collName(v: RankView): string {
  const c = v.coll!;
  return `${c.op}${c.detail ? ` "${c.detail}"` : ""} (seq ${c.seq})`;
}

function collKey(v: RankView): string {
  return JSON.stringify([v.coll!.op, v.coll!.seq, v.coll!.detail ?? ""]);
}

/** What a rank that is not in the stuck collective is doing. */
function elsewhere(rank: number, v: RankView | undefined): string {
  if (!v) return `rank ${rank} has not reported (not started, or died before its first report)`;
  if (v.status === "exited") return `rank ${rank} has exited`;
  if (v.inColl) return `rank ${rank} waits at ${collName(v)} for ${seconds(v.collS)}`;
  if (phaseIsStale(v)) {
    // Its record is old and it had gone past its phase: where it is now is not known.
    return `rank ${rank} is elsewhere, phase unknown (its last record, phase "${v.phase}", is ${
      seconds(v.heardS)
    } old)`;
  }
  return `rank ${rank} is elsewhere: phase "${v.phase}" for ${seconds(v.phaseS)}`;
}

/** A running rank silent for this long is blocked in a synchronous call (its heartbeat is 1 s). */
export const SILENT_S = 3;

/**
 * A silent rank's phase is stale when its last record shows a collective finished after the phase
 * began: the rank had moved on (a loop without `await` runs collectives that no phase announces
 * and never sends its heartbeat), so the phase says nothing about now. A phase with no collective
 * after it (the user's `phase("scan dataset")` around synchronous work) is still true.
 */
function phaseIsStale(v: RankView): boolean {
  return v.status === "running" && v.heardS >= SILENT_S && v.coll !== null && !v.inColl &&
    v.collS <= v.phaseS;
}

/**
 * A rank that stopped reporting while running is blocked in native code; a
 * rank's frequent collectives are reported only every ~100 ms, so it is
 * taken to wait in the collective after the last one it reported.
 */
function inferBlocked(v: RankView, processState: string | null): RankView {
  // A silent rank in a phase of its own (the user's `phase("scan dataset")`) is busy, not blocked;
  // so is one whose process the launcher sees running code ("R"): the guess would be wrong.
  if (
    v.status !== "running" || v.inColl || v.heardS < SILENT_S || v.coll === null ||
    !v.phaseFrequent || processState === "R"
  ) return v;
  const coll = {
    ...v.coll,
    seq: v.coll.seq + 1,
    op: "collective",
    detail: `after ${v.coll.op} seq ${v.coll.seq}`,
  };
  return { ...v, coll, inColl: true, collS: v.heardS };
}

/**
 * The hang, if any rank has waited in a collective for at least
 * `thresholdS`: the largest group of ranks waiting at the same collective,
 * and what each other rank of `worldSize` is doing.
 */
export function findHang(
  reported: readonly RankView[],
  worldSize: number,
  thresholdS: number,
  processState: (rank: number, pid: number) => string | null = () => null,
  silentNodes: readonly SilentNode[] = [],
): Hang | null {
  // What the launcher sees itself comes first: a rank whose process is stopped (SIGSTOP, a
  // debugger, a suspended job) is the stall, whatever its last published record says; it is
  // never counted among the ranks that wait. The ranks of a node whose launcher went silent are
  // neither blamed nor counted: nothing current is known of them.
  const unknown = new Set(silentNodes.flatMap((n) => n.ranks));
  const stoppedRanks = reported.filter((v) =>
    !unknown.has(v.rank) && v.status === "running" &&
    STOPPED_STATES.has(processState(v.rank, v.pid) ?? "")
  );
  const isStopped = new Set([...stoppedRanks.map((v) => v.rank), ...unknown]);
  const views = reported.filter((v) => !isStopped.has(v.rank)).map((v) =>
    inferBlocked(v, processState(v.rank, v.pid))
  );
  const stuck = views.filter((v) => v.inColl && v.status === "running" && v.collS >= thresholdS);
  if (stuck.length === 0) return null;
  const groups = new Map<string, RankView[]>();
  for (const v of stuck) {
    const k = collKey(v);
    groups.set(k, [...(groups.get(k) ?? []), v]);
  }
  const waitOf = (g: RankView[]) => Math.max(...g.map((v) => v.collS));
  const [key, group] = [...groups].sort(([, a], [, b]) =>
    b.length - a.length || waitOf(b) - waitOf(a)
  )[0]!;
  // Every rank in the same collective counts as waiting, even those that arrived recently.
  const members = views.filter((v) => v.inColl && collKey(v) === key);
  const memberRanks = new Set(members.map((v) => v.rank));
  const byRank = new Map(views.map((v) => [v.rank, v]));
  const others: string[] = [];
  for (let r = 0; r < worldSize; r++) {
    if (!memberRanks.has(r) && !isStopped.has(r)) others.push(elsewhere(r, byRank.get(r)));
  }
  const waitS = waitOf(group);
  const who = members.length === 1
    ? `rank ${members[0]!.rank} waits`
    : `ranks ${rankList([...memberRanks])} wait`;
  const head = `${who} at ${collName(group[0]!)} for ${seconds(waitS)}`;
  const stopped = stoppedRanks.map((v) =>
    `rank ${v.rank} (pid ${v.pid}) is ${
      PROCESS_STATES[processState(v.rank, v.pid)!]
    } (process state "${processState(v.rank, v.pid)}": SIGSTOP, a debugger or a suspended job) ` +
    `and has not been heard from for ${seconds(v.heardS)}`
  );
  stopped.push(...silentNodes.map(silentNodeText));
  const sentence = stopped.length > 0
    ? `${stopped.join("; ")}: ${head}${others.length > 0 ? `; ${others.join("; ")}` : ""}`
    : others.length === 0
    ? `${head}; every rank is in it, so the collective itself is stuck`
    : `${head}; ${others.join("; ")}`;
  return {
    signature: JSON.stringify([
      key,
      [...memberRanks].sort(),
      [...isStopped].sort(),
      silentNodes.map((n) => n.node),
      others.map((o) => o.replace(/ (for [\d.]+ s|is [\d.]+ s old\))$/, "")),
    ]),
    waitS,
    sentence,
  };
}

/** A node whose launcher stopped forwarding what it sees of its ranks (launch/node_view.ts). */
export interface SilentNode {
  node: number;
  /** its ranks that are silent too: where they are is not known */
  ranks: number[];
  /** seconds since its launcher was last heard from */
  heardS: number;
}

function silentNodeText(n: SilentNode): string {
  return `node ${n.node}'s launcher has not been heard from for ${
    seconds(n.heardS)
  } (the node is stopped, overloaded or cut off), so where rank(s) ${
    rankList(n.ranks)
  } are is not known`;
}

/** Process states of a rank that cannot run until someone continues it. */
const STOPPED_STATES = new Set(["T", "t"]);

/** What the /proc state letter of a silent rank says about it. */
const PROCESS_STATES: Record<string, string> = {
  T: "stopped by a signal",
  t: "stopped by a debugger",
  R: "running code",
  S: "waiting in a system call",
  D: "waiting for the disk",
};

/** Options of rankTable(). */
export interface TableOptions {
  worldSize: number;
  /** ranks per node, to show each rank's node */
  nproc: number;
  /** how finished ranks ended, when the launcher knows ("exit 1", "SIGKILL") */
  exits?: ReadonlyMap<number, string>;
  /** the process state letter of a rank's pid on this machine (/proc), or null when unknown */
  processState?: (rank: number, pid: number) => string | null;
  /** ranks whose last collective call failed (from their failure notices): rank → its seq */
  failedIn?: ReadonlyMap<number, number>;
}

/** A plain-text table: rank, node, host, pid, state, phase, time in phase, last collective, last heard. */
export function rankTable(views: readonly RankView[], opts: TableOptions): string {
  const byRank = new Map(views.map((v) => [v.rank, v]));
  const rows: string[][] = [[
    "rank",
    "node",
    "host",
    "pid",
    "state",
    "phase",
    "in phase",
    "last collective",
    "heard",
  ]];
  for (let r = 0; r < opts.worldSize; r++) {
    const v = byRank.get(r);
    const node = String(Math.floor(r / opts.nproc));
    const exit = opts.exits?.get(r);
    if (!v) {
      rows.push([String(r), node, "-", "-", exit ?? "no report", "-", "-", "-", "-"]);
      continue;
    }
    // A running rank whose heartbeat stopped: its JS thread is blocked (a native call), or the
    // process is stopped. Its last report is all that is known of where it is.
    const silent = v.status === "running" && v.heardS >= SILENT_S;
    let coll = "-";
    if (v.coll && opts.failedIn?.get(r) === v.coll.seq) {
      coll = `${collName(v)} failed ${seconds(v.collS)} ago`;
    } else if (v.coll) {
      coll = v.inColl
        ? `${collName(v)} ${silent ? "stuck" : "waiting"} ${seconds(v.collS)}`
        : silent
        ? `past ${collName(v)} (done ${seconds(v.collS)} ago)`
        : `${collName(v)} done ${seconds(v.collS)} ago`;
    }
    let state = exit ?? v.status;
    if (silent) {
      const what = PROCESS_STATES[opts.processState?.(r, v.pid) ?? ""];
      state = `not responding${what ? ` (${what})` : ""}${exit ? `, then ${exit}` : ""}`;
    }
    // A stale phase is a fact about then, not now: shown as such, with no time that would read
    // as current.
    rows.push([
      String(r),
      node,
      v.host,
      String(v.pid),
      state,
      phaseIsStale(v) ? `unknown (last: ${v.phase})` : v.phase,
      phaseIsStale(v) ? "-" : seconds(v.phaseS),
      coll,
      `${seconds(v.heardS)} ago`,
    ]);
  }
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((row) => row[c]!.length)));
  return rows.map((row) => row.map((cell, c) => cell.padEnd(widths[c]!)).join("  ").trimEnd()).join(
    "\n",
  );
}
