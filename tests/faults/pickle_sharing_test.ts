/**
 * A tiny pickle that shares each dict twice through its memo (a DAG, not a
 * cycle) expands to 2^depth names: loading keeps the sharing (memo entries
 * are references), and flattening counts the expansion first, in linear
 * time, and refuses it with a clear error instead of building it. A cap on
 * container elements bounds the unpickler itself.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadTorchFile } from "../../io/torch_load.ts";
import { flattenStateDict, toJsonValue } from "../../io/state_dict.ts";
import { unpickle } from "../../io/pickle.ts";
import { readWeights } from "../../nn/load.ts";
import { pickleOf, PickleWriter } from "../io/_pickle_writer.ts";
import { buildTorchZip } from "../io/_zip_writer.ts";

/** d0 = {}; d_i = {"a": d_{i-1}, "b": d_{i-1}} through BINGET; returns d_depth. */
function sharedDicts(depth: number): Uint8Array {
  const w = new PickleWriter().proto(2);
  w.raw(0x7d).binput(0);
  for (let i = 1; i <= depth; i++) {
    w.raw(0x7d).mark().str("a").binget(i - 1).str("b").binget(i - 1).raw(0x75).binput(i);
  }
  return w.stop().bytes();
}

const noGlobals = (m: string, n: string): never => {
  throw new Error(`no ${m}.${n}`);
};

Deno.test("memo references stay shared: depth-63 shared dicts unpickle at once, as one object per level", () => {
  const t0 = performance.now();
  const { value } = unpickle(sharedDicts(63), { findGlobal: noGlobals });
  const ms = performance.now() - t0;
  let d = value as Map<string, unknown>;
  for (let level = 63; level > 0; level--) {
    assert.equal(d.get("a"), d.get("b"), `level ${level}: the two entries are one object`);
    d = d.get("a") as Map<string, unknown>;
  }
  assert.equal(d.size, 0);
  assert.ok(ms < 1000, `unpickling took ${ms} ms`);
});

Deno.test("loadWeights on depth-63 shared dicts fails clearly in well under a second", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-pickle-dag-" });
  try {
    const path = join(dir, "shared.pt");
    Deno.writeFileSync(path, buildTorchZip("archive", sharedDicts(63), []));
    assert.ok(Deno.statSync(path).size < 4096, "the file is tiny");
    const t0 = performance.now();
    assert.throws(
      () => readWeights(path),
      (e: Error) => {
        assert.match(e.message, new RegExp(`^${path.replace(/[.]/g, "\\.")}: Cannot flatten`));
        assert.match(e.message, /expand to about 9\.2e\+18 names, more than the limit of \d+/);
        assert.match(e.message, /shares dicts under many names through the pickle memo/);
        return true;
      },
    );
    const ms = performance.now() - t0;
    assert.ok(ms < 1000, `refusing took ${ms} ms`);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("at depth 20 (a million names from 800 bytes) the refusal is immediate too", () => {
  const value = loadTorchFile(buildTorchZip("archive", sharedDicts(20), []));
  const t0 = performance.now();
  assert.throws(() => flattenStateDict(value), /expand to 1048576 names, more than the limit/);
  assert.throws(() => toJsonValue(value), /expands to 2097151 values, more than the limit/);
  assert.ok(performance.now() - t0 < 500);
});

Deno.test("modest honest sharing still flattens: one state dict saved under two names", () => {
  const sd = new Map<string, unknown>([["w", 1], ["b", 2]]);
  const flat = flattenStateDict(new Map<string, unknown>([["model", sd], ["ema", sd]]));
  assert.deepEqual([...flat.keys()], ["model.w", "model.b", "ema.w", "ema.b"]);
  // An explicit limit is obeyed, and cycles are still named by path.
  assert.throws(
    () => flattenStateDict(new Map([["model", sd]]), "", { maxEntries: 1 }),
    /limit of 1/,
  );
  const loop = new Map<string, unknown>();
  loop.set("self", loop);
  assert.throws(() => flattenStateDict(loop), /the dict at "self" contains itself/);
  const list: unknown[] = [];
  list.push(list);
  assert.throws(() => toJsonValue(list), /contains itself/);
});

Deno.test("the unpickler caps the elements of all containers together, with a clear error", () => {
  const big = pickleOf([new Map([["k", [1, 2, 3, 4]]]), [5, 6, 7]]);
  assert.doesNotThrow(() => unpickle(big, { findGlobal: noGlobals, maxElements: 10 }));
  assert.throws(
    () => unpickle(big, { findGlobal: noGlobals, maxElements: 9 }),
    /Invalid pickle in <buffer> at byte \d+ \(\w+\): more than 9 elements in lists, tuples and dicts together \(the limit\)/,
  );
  // DUP + APPENDS growing one list: every element counts.
  const w = new PickleWriter().proto(2).raw(0x5d).mark();
  for (let i = 0; i < 100; i++) w.int(i);
  const dupes = w.raw(0x65).stop().bytes();
  assert.throws(
    () => loadTorchFile(buildTorchZip("archive", dupes, []), "dupes.pt", { maxElements: 50 }),
    /dupes\.pt.*more than 50 elements/,
  );
});
