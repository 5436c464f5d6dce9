/**
 * One rank of the process-group tests, started by tests/distributed/
 * process_group*_test.ts with the launcher's environment set.
 *
 *   pg_rank.ts matrix <out file>   run the case matrix (_cases.ts; sizes from
 *                                  CASE_SIZES, dtypes from CASE_DTYPES, data
 *                                  CASE_OFFSET bytes past an aligned address;
 *                                  CASE_ALLREDUCE_ONLY=1: sum, avg, max only;
 *                                  CASE_SHARED=1: allReduce's data in the group's
 *                                  shared region, CASE_OFFSET bytes past a 64-byte
 *                                  boundary there; CASE_RESERVE=<bytes>: that
 *                                  region reserved after open by reserveShared)
 *                                  and write every result,
 *                                  concatenated, to the file
 *   pg_rank.ts serve               join the group, print {"event":"ready"}, then
 *                                  run one command per stdin line (see below)
 *
 * Every outcome is one JSON line on stdout, so the test can assert on it.
 */
import { initProcessGroup } from "../../../distributed/init_process_group.ts";
import type { ProcessGroup } from "../../../distributed/process_group.ts";
import type { BufferLike, CollectiveDType, ReduceOp } from "../../../distributed/process_group.ts";
import { buildCases, BYTES, type CollectiveCase, makeInput, outputCount } from "./_cases.ts";

function say(obj: Record<string, unknown>): void {
  console.log(JSON.stringify(obj));
}

/** Views raw bytes as the buffer kind the test wants to cover for `dtype`:
 *  typed arrays for most, the low-level {ptr, count, dtype} for i32 and bf16. */
function asBuffer(bytes: Uint8Array, dtype: CollectiveDType): BufferLike {
  const n = bytes.length / BYTES[dtype];
  switch (dtype) {
    case "f32":
      return new Float32Array(bytes.buffer, bytes.byteOffset, n);
    case "f64":
      return new Float64Array(bytes.buffer, bytes.byteOffset, n);
    case "f16":
      return new Float16Array(bytes.buffer, bytes.byteOffset, n);
    case "i64":
      return new BigInt64Array(bytes.buffer, bytes.byteOffset, n);
    case "u8":
      return bytes;
    default:
      return { ptr: n === 0 ? null : Deno.UnsafePointer.of(bytes), count: n, dtype };
  }
}

/** `bytes` copied to `offset` bytes past the start of a fresh (aligned) buffer. */
function atOffset(bytes: Uint8Array, offset: number): Uint8Array {
  if (offset === 0) return bytes;
  const moved = new Uint8Array(bytes.length + offset).subarray(offset);
  moved.set(bytes);
  return moved;
}

const OFFSET = Number(Deno.env.get("CASE_OFFSET") ?? 0);
const SHARED = Deno.env.get("CASE_SHARED") === "1";

/** `bytes` copied to `offset` bytes past an array in the group's shared region. */
function inShared(pg: ProcessGroup, bytes: Uint8Array, offset: number): Uint8Array {
  const moved = pg.allocShared!(bytes.length + offset, "u8").subarray(offset);
  moved.set(bytes);
  return moved;
}

function runCase(pg: ProcessGroup, c: CollectiveCase, index: number): Uint8Array {
  const data = makeInput(c, index, pg.rank, pg.size);
  const inp = SHARED && c.op === "allReduce" ? inShared(pg, data, OFFSET) : atOffset(data, OFFSET);
  switch (c.op) {
    case "allReduce":
      pg.allReduce(asBuffer(inp, c.dtype), c.redop);
      return inp;
    case "broadcast":
      pg.broadcast(asBuffer(inp, c.dtype), c.root!);
      return inp;
    case "allGather":
    case "reduceScatter": {
      const out = atOffset(new Uint8Array(outputCount(c, pg.size) * BYTES[c.dtype]), OFFSET);
      if (c.op === "allGather") pg.allGather(asBuffer(out, c.dtype), asBuffer(inp, c.dtype));
      else pg.reduceScatter(asBuffer(out, c.dtype), asBuffer(inp, c.dtype), c.redop);
      return out;
    }
  }
}

function matrix(outFile: string): void {
  const pg = initProcessGroup();
  const reserve = Deno.env.get("CASE_RESERVE");
  if (reserve) pg.reserveShared!(Number(reserve));
  const sizes = (Deno.env.get("CASE_SIZES") ?? "0,1,7,1000").split(",").map(Number);
  const dtypes = Deno.env.get("CASE_DTYPES")?.split(",") as CollectiveDType[] | undefined;
  const allReduceOnly = Deno.env.get("CASE_ALLREDUCE_ONLY") === "1";
  const results = buildCases(pg.size, sizes, dtypes, allReduceOnly).map((c, i) => {
    const out = runCase(pg, c, i);
    if (i % 16 === 0) pg.barrier(`after case ${i}`);
    return out;
  });
  const total = results.reduce((n, r) => n + r.length, 0);
  const all = new Uint8Array(total);
  let off = 0;
  for (const r of results) {
    all.set(r, off);
    off += r.length;
  }
  Deno.writeFileSync(outFile, all);
  pg.close();
  say({ event: "done", rank: pg.rank, bytes: total, backend: pg.backend });
}

/** Runs one stdin command: `allreduce <count> <dtype> <timeoutMs> [sum|avg|max|min]`
 *  (`allreduce-shared`: the buffer in the group's shared region), `reserve <bytes> <timeoutMs>`
 *  (reserveShared; the answer has the SharedReserveError's fields and the region's size),
 *  `broadcast <count> <root> <timeoutMs>`, `barrier <name> <timeoutMs>`, `close`. */
function command(pg: ProcessGroup, words: string[]): Record<string, unknown> {
  const [cmd, a = "", b = "", c = "", d = "sum"] = words;
  const t0 = performance.now();
  try {
    if (cmd === "allreduce" || cmd === "allreduce-shared") {
      const dtype = b as CollectiveDType;
      const n = Number(a) * BYTES[dtype];
      const bytes = cmd === "allreduce" ? new Uint8Array(n) : inShared(pg, new Uint8Array(n), 0);
      pg.allReduce(asBuffer(bytes, dtype), d as ReduceOp, { timeoutMs: Number(c) });
    } else if (cmd === "reserve") {
      try {
        pg.reserveShared!(Number(a), { timeoutMs: Number(b) });
      } catch (e) {
        const r = e as { name: string; failedRank?: number; step?: string };
        return {
          event: "done",
          cmd,
          ok: false,
          error: (e as Error).message,
          errorName: r.name,
          failedRank: r.failedRank,
          step: r.step,
          sharedBytes: pg.sharedBytes,
          ms: performance.now() - t0,
        };
      }
      return {
        event: "done",
        cmd,
        ok: true,
        sharedBytes: pg.sharedBytes,
        ms: performance.now() - t0,
      };
    } else if (cmd === "broadcast") {
      pg.broadcast(new Float32Array(Number(a)), Number(b), { timeoutMs: Number(c) });
    } else if (cmd === "barrier") {
      pg.barrier(a, { timeoutMs: Number(b) });
    } else if (cmd === "close") {
      pg.close();
    } else {
      throw new Error(`unknown command ${cmd}`);
    }
    return { event: "done", cmd, ok: true, ms: performance.now() - t0 };
  } catch (e) {
    const status = (e as { status?: number }).status;
    return {
      event: "done",
      cmd,
      ok: false,
      error: (e as Error).message,
      status,
      ms: performance.now() - t0,
    };
  }
}

async function serve(): Promise<void> {
  let pg: ProcessGroup;
  const t0 = performance.now();
  try {
    pg = initProcessGroup();
  } catch (e) {
    say({ event: "init-failed", error: (e as Error).message, ms: performance.now() - t0 });
    return;
  }
  say({ event: "ready", rank: pg.rank, pid: Deno.pid, backend: pg.backend });
  const lines = Deno.stdin.readable.pipeThrough(new TextDecoderStream());
  let pending = "";
  for await (const text of lines) {
    pending += text;
    let nl;
    while ((nl = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, nl).trim();
      pending = pending.slice(nl + 1);
      if (line === "") continue;
      say({ event: "enter", cmd: line });
      say(command(pg, line.split(/\s+/)));
    }
  }
}

if (import.meta.main) {
  const [mode, arg] = Deno.args;
  if (mode === "matrix") matrix(arg!);
  else if (mode === "serve") await serve();
  else throw new Error(`usage: pg_rank.ts matrix <out file> | serve (got ${Deno.args.join(" ")})`);
}
