/**
 * What a rank pays per collective enter or exit to keep its state page (distributed/control/
 * state_page.ts) current, in µs of CPU per update, alternating rounds:
 * - write (old): the whole state copied and serialised, then a seek and a write of the file, as
 *   the page was written before it was mapped;
 * - mapped page: the same record stored into the mapped page (StatePage.write);
 * - sink: StorePhaseSink.collective() with a mapped page and a store that drops the records, the
 *   whole per-collective cost of a rank's bookkeeping now.
 *
 *   deno run -A scripts/bench_state_page.ts [--updates 200000] [--rounds 5]
 */
import { parseArgs } from "node:util";
import process from "node:process";
import { StatePage, statePagePath } from "../distributed/control/state_page.ts";
import { StorePhaseSink } from "../distributed/control/rank_state.ts";
import type { StoreClient } from "../distributed/control/store.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    updates: { type: "string", default: "200000" },
    rounds: { type: "string", default: "5" },
  },
});
/** A command-line count: a whole number >= 1, or exit 2 naming the option. */
function count(option: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 1) {
    console.error(`--${option} ${raw}: expected a whole number >= 1`);
    Deno.exit(2);
  }
  return n;
}
const N = count("updates", values.updates), ROUNDS = count("rounds", values.rounds);

const dir = Deno.makeTempDirSync({ prefix: "dtrain-bench-page-" });
const state = {
  rank: 0,
  host: Deno.hostname(),
  pid: Deno.pid,
  phase: "allreduce bucket 0 of step 12",
  phaseAt: Date.now(),
  phaseFrequent: true,
  coll: null as null | { seq: number; op: string; bytes: number },
  inColl: false,
  collAt: 0,
  status: "running",
  sentAt: 0,
};

/** The page as it was written before: seek to 0, write the record (padded as it was). */
function oldWay(): (seq: number) => void {
  const file = Deno.openSync(`${dir}/old.state`, { write: true, create: true, truncate: true });
  const encoder = new TextEncoder();
  const page = new Uint8Array(1024);
  let used = 0;
  return (seq) => {
    state.coll = { seq, op: "allReduce", bytes: 4096 };
    state.inColl = seq % 2 === 0;
    state.collAt = Date.now();
    const json = JSON.stringify({ ...state, sentAt: state.collAt });
    const { written } = encoder.encodeInto(json, page);
    const end = Math.max(written, used);
    page.fill(0x20, written, end);
    used = written;
    file.seekSync(0, Deno.SeekMode.Start);
    file.writeSync(page.subarray(0, end));
  };
}

function mappedWay(): (seq: number) => void {
  const page = StatePage.open(statePagePath(dir, 1))!;
  if (!page.mapped) throw new Error("the page could not be mapped here");
  return (seq) => {
    state.coll = { seq, op: "allReduce", bytes: 4096 };
    state.inColl = seq % 2 === 0;
    state.collAt = Date.now();
    page.write(JSON.stringify({ ...state, sentAt: state.collAt }));
  };
}

function sinkWay(): (seq: number) => void {
  const store = { post: () => {} } as unknown as StoreClient;
  const sink = new StorePhaseSink(store, "k", { ...state }, StatePage.open(statePagePath(dir, 2)));
  sink.phase(state.phase, state.phaseAt, true);
  const rec = { seq: 0, op: "allReduce", bytes: 4096 };
  return (seq) => {
    rec.seq = seq;
    sink.collective(rec, seq % 2 === 0 ? "enter" : "exit");
  };
}

const ways: [string, (seq: number) => void][] = [
  ["write (old): serialise, seek, write", oldWay()],
  ["mapped page: serialise, store", mappedWay()],
  ["StorePhaseSink.collective, mapped", sinkWay()],
];
const best = new Map<string, number>();
for (let r = 0; r < ROUNDS; r++) {
  for (const [name, update] of ways) {
    const t0 = process.cpuUsage();
    for (let i = 0; i < N; i++) update(i);
    const t = process.cpuUsage(t0);
    const us = (t.user + t.system) / N;
    best.set(name, Math.min(best.get(name) ?? Infinity, us));
  }
}
console.log(`CPU µs per update, best of ${ROUNDS} rounds of ${N} (load ${Deno.loadavg()[0]}):`);
for (const [name] of ways) console.log(`  ${name.padEnd(40)} ${best.get(name)!.toFixed(3)}`);
Deno.removeSync(dir, { recursive: true });
