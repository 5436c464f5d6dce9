/**
 * What the ranks of a 2-rank toy DDP run wait for, from the kernel's scheduler trace: the run
 * under `perf sched record`, then, for each rank's main thread over the later part of the ranks'
 * lives (--from 0.3: the last 70%, after start-up: training, checkpoints, shutdown), the time it ran, the time it was runnable but off a core (and which threads held the
 * cores meanwhile: the other rank, its own V8 helper threads, the launcher, or other programs),
 * and the time it slept (in the reduction's futex, mostly), split by what its peer was doing
 * (running: the peer was behind; runnable: the peer waited for a core; asleep: both waited).
 * Needs `perf` and the right to trace the scheduler (root, or kernel.perf_event_paranoid <= -1).
 *
 *   deno run -A scripts/ddp_wait_report.ts [--epochs 3] [--from 0.3] [-- extra dtrain options]
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

type State = "run" | "runnable" | "sleep";

interface Event {
  t: number;
  cpu: number;
  kind: "switch" | "wake" | "fork";
  tid: number;
  pid: number;
  comm: string;
  /** switch: the thread leaving, its state letter, and the thread coming in */
  prev?: number;
  prevState?: string;
  prevComm?: string;
  next?: number;
  nextComm?: string;
  /** wake: the thread woken; fork: the child */
  target?: number;
}

/** Parses `perf script -F comm,tid,pid,cpu,time,event,trace` lines of sched events. */
export function parseSchedEvents(text: string): Event[] {
  const out: Event[] = [];
  const head = /^\s*(.+?)\s+(\d+)\/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)$/;
  for (const line of text.split("\n")) {
    const m = head.exec(line);
    if (!m) continue;
    const [, comm, pid, tid, cpu, t, ev, rest] = m;
    const base = {
      t: Number(t),
      cpu: Number(cpu),
      tid: Number(tid),
      pid: Number(pid),
      comm: comm!,
    };
    if (ev === "sched_switch") {
      const s =
        /prev_comm=(.*?) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)/
          .exec(rest!);
      if (!s) continue;
      out.push({
        ...base,
        kind: "switch",
        prevComm: s[1],
        prev: Number(s[2]),
        prevState: s[3],
        nextComm: s[4],
        next: Number(s[5]),
      });
    } else if (ev === "sched_waking" || ev === "sched_wakeup_new") {
      const s = /pid=(\d+)/.exec(rest!);
      if (s) out.push({ ...base, kind: "wake", target: Number(s[1]) });
    } else if (ev === "sched_process_fork") {
      const s = /child_pid=(\d+)/.exec(rest!);
      if (s) out.push({ ...base, kind: "fork", target: Number(s[1]) });
    }
  }
  return out;
}

/** Per rank: ms in each state (sleep split by the peer's state), and who held the cores while it was runnable. */
export interface WaitReport {
  windowMs: number;
  ranks: { tid: number; ms: Record<string, number>; holders: Map<string, number> }[];
  /** ms of both cores' time by holder */
  cores: Map<string, number>;
}

/**
 * Classifies the trace: `ranks` are the ranks' process ids (their main threads' ids), `launcher`
 * the launcher's; the window runs from `from` of the way between the later rank's first event
 * and the earlier rank's last one.
 */
export function waitReport(
  events: Event[],
  ranks: number[],
  launcher: number,
  from: number,
): WaitReport {
  const procOf = new Map<number, number>(), name = new Map<number, string>();
  for (const e of events) {
    procOf.set(e.tid, e.pid);
    name.set(e.tid, e.comm);
    if (e.kind === "switch") {
      name.set(e.prev!, e.prevComm!);
      name.set(e.next!, e.nextComm!);
    }
  }
  const involves = (tid: number) => (e: Event) =>
    e.tid === tid || e.prev === tid || e.next === tid || e.target === tid;
  const first = (tid: number) => events.find(involves(tid))!.t;
  const last = (tid: number) => events.findLast(involves(tid))!.t;
  const start = Math.max(...ranks.map(first)), end = Math.min(...ranks.map(last));
  const w0 = start + from * (end - start), w1 = end;
  const holder = (tid: number): string => {
    if (tid === 0) return "idle";
    const r = ranks.indexOf(tid);
    if (r >= 0) return `rank ${r} main thread`;
    const p = procOf.get(tid);
    const pr = p === undefined ? -1 : ranks.indexOf(p);
    if (pr >= 0) return `rank ${pr} ${name.get(tid) ?? "?"}`;
    if (p === launcher) {
      return `launcher ${tid === launcher ? "main thread" : name.get(tid) ?? "?"}`;
    }
    return `other program: ${name.get(tid) ?? "?"}`;
  };
  const state = new Map<number, State>();
  const onCpu = new Map<number, number>();
  const report: WaitReport = {
    windowMs: (w1 - w0) * 1000,
    ranks: ranks.map((tid) => ({ tid, ms: {}, holders: new Map() })),
    cores: new Map(),
  };
  const add = (m: Map<string, number>, k: string, ms: number) => m.set(k, (m.get(k) ?? 0) + ms);
  let lastT: number | null = null;
  for (const e of events) {
    if (lastT !== null) {
      const a = Math.max(lastT, w0), b = Math.min(e.t, w1);
      if (b > a) {
        const ms = (b - a) * 1000;
        ranks.forEach((tid, r) => {
          const s = state.get(tid) ?? "sleep";
          const peer = state.get(ranks[1 - r]!) ?? "sleep";
          const key = s === "sleep" ? `asleep, peer ${peer === "run" ? "running" : peer}` : s;
          const row = report.ranks[r]!;
          row.ms[key] = (row.ms[key] ?? 0) + ms;
          if (s === "runnable" && onCpu.size) {
            for (const held of onCpu.values()) add(row.holders, holder(held), ms / onCpu.size);
          }
        });
        for (const held of onCpu.values()) add(report.cores, holder(held), ms);
      }
    }
    lastT = e.t;
    if (e.kind === "switch") {
      state.set(e.prev!, e.prevState!.startsWith("R") ? "runnable" : "sleep");
      state.set(e.next!, "run");
      onCpu.set(e.cpu, e.next!);
    } else if (e.kind === "wake" && (state.get(e.target!) ?? "sleep") === "sleep") {
      state.set(e.target!, "runnable");
    }
  }
  return report;
}

/**
 * The launcher and its ranks, in rank order: the pids come from the launcher's own line ("started
 * ranks 0,1 of 2 on node 0 (pids A,B; …"), not from the order of forks in the trace; the launcher
 * is the process that forked them. Throws, naming what is missing, rather than guess.
 */
export function findRanks(
  events: Event[],
  launcherLog: string,
): { ranks: number[]; launcher: number } {
  const m = /started ranks 0,1 of 2 on node 0 \(pids (\d+),(\d+)/.exec(launcherLog);
  if (!m) {
    throw new Error(
      "the launcher's output does not name its 2 ranks' pids (\"started ranks 0,1 …\")",
    );
  }
  const ranks = [Number(m[1]), Number(m[2])];
  const fork = events.find((e) => e.kind === "fork" && ranks.includes(e.target!));
  if (!fork) {
    throw new Error(
      `the scheduler trace has no fork of rank pid ${
        ranks.join(" or ")
      }: perf lost events (rerun it)`,
    );
  }
  return { launcher: fork.pid, ranks };
}

/** Runs a command: its stdout and stderr, or an error naming the command and its stderr. */
async function run(
  cmd: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ stdout: string; stderr: string }> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(cmd, { args, env, stdout: "piped", stderr: "piped" }).output();
  } catch (e) {
    throw new Error(`cannot run ${cmd}: ${(e as Error).message} (is linux perf installed?)`);
  }
  const err = new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`${cmd} ${args.slice(0, 3).join(" ")} … failed:\n${err}`);
  return { stdout: new TextDecoder().decode(out.stdout), stderr: err };
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    options: {
      epochs: { type: "string", default: "3" },
      from: { type: "string", default: "0.3" },
    },
    allowPositionals: true,
  });
  const from = Number(values.from);
  if (!(from >= 0 && from < 1)) {
    throw new RangeError(`--from must be in [0, 1), got ${values.from}`);
  }
  const tmp = Deno.makeTempDirSync({ prefix: "dtrain-wait-report-" });
  try {
    const data = join(tmp, "sched.data");
    const load = Deno.readTextFileSync("/proc/loadavg").split(" ")[0];
    const recorded = await run("perf", [
      "sched",
      "record",
      "-o",
      data,
      "--",
      join(ROOT, "dtrain"),
      "--nproc",
      "2",
      "--threads",
      "1",
      "--run-dir",
      join(tmp, "run"),
      ...positionals,
      join(ROOT, "examples/toy_ddp.ts"),
      values.epochs!,
    ]);
    const { stdout: text } = await run("perf", [
      "script",
      "-i",
      data,
      "-F",
      "comm,tid,pid,cpu,time,event,trace",
    ]);
    const events = parseSchedEvents(text);
    const { ranks, launcher } = findRanks(events, recorded.stderr + recorded.stdout);
    const rep = waitReport(events, ranks, launcher, from);
    console.log(
      `toy DDP, 2 ranks, ${values.epochs} epochs; load average ${load}; window: the last ${
        ((1 - from) * 100).toFixed(0)
      }% of the ranks' lives, ${rep.windowMs.toFixed(0)} ms`,
    );
    const ms = (v: number) => `${v.toFixed(1)} ms (${(100 * v / rep.windowMs).toFixed(0)}%)`;
    for (const [r, row] of rep.ranks.entries()) {
      console.log(`rank ${r} main thread:`);
      for (const [k, v] of Object.entries(row.ms).sort((a, b) => b[1] - a[1])) {
        console.log(`  ${k.padEnd(28)} ${ms(v)}`);
      }
      const held = [...row.holders].sort((a, b) => b[1] - a[1]).slice(0, 6);
      console.log(
        `  while runnable, the cores were held by: ${
          held.map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", ")
        } (ms)`,
      );
    }
    console.log("both cores' time by holder:");
    const cores = [...rep.cores].sort((a, b) => b[1] - a[1]).slice(0, 12);
    const total = [...rep.cores.values()].reduce((a, b) => a + b, 0);
    for (const [k, v] of cores) {
      console.log(`  ${k.padEnd(36)} ${v.toFixed(1)} ms (${(100 * v / total).toFixed(0)}%)`);
    }
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
}
