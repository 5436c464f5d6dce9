// scripts/ddp_wait_report.ts: the scheduler trace of a 2-rank run read back as each rank's time
// running, runnable (and who held the cores) and asleep by its peer's state, on a trace written
// here by hand so every figure is known.
import assert from "node:assert/strict";
import { findRanks, parseSchedEvents, waitReport } from "../../scripts/ddp_wait_report.ts";

/** One `perf script -F comm,tid,pid,cpu,time,event,trace` line. */
const line = (
  comm: string,
  pid: number,
  tid: number,
  cpu: number,
  t: number,
  ev: string,
  trace: string,
) => `${comm.padStart(16)} ${pid}/${tid} [00${cpu}] ${t.toFixed(6)}: sched:${ev}: ${trace}`;
const sw = (cpu: number, t: number, prev: [string, number, string], next: [string, number]) =>
  line(
    prev[0],
    prev[1],
    prev[1],
    cpu,
    t,
    "sched_switch",
    `prev_comm=${prev[0]} prev_pid=${prev[1]} prev_prio=120 prev_state=${prev[2]} ==> next_comm=${
      next[0]
    } next_pid=${next[1]} next_prio=120`,
  );

Deno.test("the wait report splits each rank's time by its state and its peer's, and names who held the cores", () => {
  // ranks 10 and 20 (main threads = process ids), a program 30; times in ms from 0
  const ms = (x: number) => 100 + x / 1000;
  const text = [
    sw(0, ms(0), ["swapper", 0, "R"], ["deno", 10]), // rank 0 runs on core 0
    sw(1, ms(0), ["swapper", 0, "R"], ["deno", 20]), // rank 1 runs on core 1
    // 0-10: both run. At 10 rank 1 is preempted by the program on core 1 (runnable)
    sw(1, ms(10), ["deno", 20, "R"], ["cc1", 30]),
    // at 12 rank 0 reaches the reduction and sleeps: its peer is runnable
    sw(0, ms(12), ["deno", 10, "S"], ["swapper", 0]),
    // at 20 rank 1 gets core 0, arrives at 25 and wakes rank 0, which waits for core 1 until 30
    sw(0, ms(20), ["swapper", 0, "R"], ["deno", 20]),
    line("deno", 20, 20, 0, ms(25), "sched_waking", "comm=deno pid=10 prio=120 target_cpu=001"),
    sw(1, ms(30), ["cc1", 30, "S"], ["deno", 10]),
    sw(0, ms(40), ["deno", 20, "S"], ["swapper", 0]),
    sw(1, ms(40), ["deno", 10, "S"], ["swapper", 0]),
  ].join("\n");
  const events = parseSchedEvents(text);
  assert.equal(events.length, 9);
  const rep = waitReport(events, [10, 20], 5, 0);
  assert.equal(Math.round(rep.windowMs), 40);
  const r0 = rep.ranks[0]!, r1 = rep.ranks[1]!;
  const round = (o: Record<string, number>) =>
    Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Math.round(v * 10) / 10]));
  assert.deepEqual(round(r0.ms), {
    run: 22, // 0-12, 30-40
    "asleep, peer runnable": 8, // 12-20
    "asleep, peer running": 5, // 20-25
    runnable: 5, // 25-30: woken, core 1 still the program's
  });
  assert.deepEqual(round(r1.ms), { run: 30, runnable: 10 }); // 0-10 and 20-40 on a core
  // while rank 1 was runnable (10-20): core 1 held by the program, core 0 by rank 0 (10-12) then idle
  assert.equal(Math.round(r1.holders.get("other program: cc1")! * 10) / 10, 5);
  assert.equal(Math.round(r1.holders.get("rank 0 main thread")! * 10) / 10, 1);
  assert.equal(Math.round(r1.holders.get("idle")! * 10) / 10, 4);
  assert.equal(Math.round(rep.cores.get("other program: cc1")!), 20);
});

Deno.test("the ranks are named by the launcher's pids, whatever order the trace has their forks in", () => {
  const fork = (t: number, child: number) =>
    line(
      "deno",
      5,
      5,
      0,
      t,
      "sched_process_fork",
      `comm=deno pid=5 child_comm=deno child_pid=${child}`,
    );
  const log =
    "[dtrain] attempt 0: started ranks 0,1 of 2 on node 0 (pids 20,10; 1 native thread(s) each)";
  // rank 1 (pid 10) forked first: a fork-order guess would swap the ranks
  const events = parseSchedEvents([fork(1, 10), fork(1.001, 20)].join("\n"));
  assert.deepEqual(findRanks(events, log), { launcher: 5, ranks: [20, 10] });
  assert.throws(() => findRanks(events, "no launcher line"), /does not name its 2 ranks' pids/);
  assert.throws(() => findRanks([], log), /no fork of rank pid 20 or 10: perf lost events/);
});
