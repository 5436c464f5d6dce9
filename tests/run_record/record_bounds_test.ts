/**
 * The run-record readers against hostile files: run.json, config.json and
 * metrics.jsonl nested thousands of levels deep, far larger than any record,
 * or randomly mutated. Every case ends in bounded time with either a parsed
 * run or an error that names the file; none overflows the stack, and
 * `dtrain diff` answers every such error with exit 2 (its code for errors),
 * never 1 ("the runs differ").
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { diffMain } from "../../record_tools/diff.ts";
import { MAX_RECORD_BYTES, readRunDir } from "../../run_record/format.ts";
import { jsonNesting, MAX_RECORD_DEPTH, parseBoundedJson } from "../../io/json_bounds.ts";
import { baseSpec, withTempDir, writeRun } from "./_fixtures.ts";

const SEED = Number(Deno.env.get("DTRAIN_FUZZ_SEED") ?? 20261206);
const CASES = Number(Deno.env.get("DTRAIN_FUZZ_CASES") ?? 600);

async function runDiff(args: string[]): Promise<{ code: number; err: string }> {
  const err: string[] = [];
  const code = await diffMain(args, () => {}, (t) => err.push(t));
  return { code, err: err.join("\n") };
}

/** A deep config: {"a":{"a":…}} `levels` deep, as a config.json's config field. */
function deepConfig(levels: number): string {
  return `{"config":${'{"a":'.repeat(levels)}1${
    "}".repeat(levels)
  },"seed":1,"worldSize":2,"device":"cpu"}`;
}

Deno.test("dtrain diff on a config nested 100 000 levels deep exits 2 naming the file and the depth", async () => {
  await withTempDir(async (root) => {
    const a = writeRun(root, "a", baseSpec());
    const b = writeRun(root, "b", baseSpec());
    Deno.writeTextFileSync(join(b, "config.json"), deepConfig(100_000));
    const r = await runDiff([a, b]);
    assert.equal(r.code, 2, r.err);
    assert.match(r.err, /config\.json: JSON nested deeper than 64 levels \(at character \d+\)/);
    // Up to the bound a deep config is read and compared (the walk is bounded by the same depth).
    Deno.writeTextFileSync(join(b, "config.json"), deepConfig(MAX_RECORD_DEPTH - 2));
    const ok = await runDiff([a, b]);
    assert.equal(ok.code, 1, ok.err);
  });
});

Deno.test("jsonNesting() ignores brackets inside strings and escapes, and stops at the bound", () => {
  assert.deepEqual(jsonNesting('{"a":"[[[{{\\"[["}'), { depth: 1, at: -1 });
  assert.deepEqual(jsonNesting("[[[]],[[[]]]]"), { depth: 4, at: -1 });
  assert.equal(jsonNesting("[".repeat(1000), 10).depth, 11);
  assert.throws(() => parseBoundedJson("[".repeat(65) + "]".repeat(65), "x"), /deeper than 64/);
  assert.deepEqual(parseBoundedJson("[".repeat(64) + "]".repeat(64), "x") !== null, true);
  assert.throws(() => parseBoundedJson('"abcdef"', "y", { maxChars: 3 }), /y: 8 characters/);
});

/** A small deterministic generator (xorshift32). */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
}

/** One mutation of a valid record text: flips, deletions, insertions of JSON tokens, deep runs, huge strings. */
function mutate(text: string, r: () => number): string {
  const at = Math.floor(r() * (text.length + 1));
  const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
  switch (Math.floor(r() * 8)) {
    case 0:
      return text.slice(0, at) + text.slice(at + 1 + Math.floor(r() * 20));
    case 1:
      return text.slice(0, at) + pick(["{", "}", "[", "]", '"', ",", ":", "\\", "\u0000"]) +
        text.slice(at);
    case 2: {
      const n = 50 + Math.floor(r() * 50_000);
      return text.slice(0, at) + pick(["[", '{"k":'] as const).repeat(n) + text.slice(at);
    }
    case 3:
      return text.slice(0, at) + '"' + "x".repeat(Math.floor(r() * 200_000)) + '"' + text.slice(at);
    case 4:
      return text.slice(0, at) + pick(["1e999", "-0", "NaN", "null", "true", "9".repeat(400)]) +
        text.slice(at);
    case 5:
      return text.slice(0, at);
    case 6:
      return text.replace(/"[a-zA-Z]+"/, pick(['"__proto__"', '"constructor"', '""', '"a"']));
    default: {
      const b = Math.floor(r() * text.length);
      return text.slice(0, b) + String.fromCharCode(Math.floor(r() * 128)) + text.slice(b + 1);
    }
  }
}

Deno.test("record readers: mutated, deep and huge run.json/config.json/metrics.jsonl parse or fail clearly, in bounded time", async () => {
  await withTempDir((root) => {
    const base = writeRun(root, "base", baseSpec());
    const files = ["run.json", "config.json", "metrics.jsonl"];
    const originals = Object.fromEntries(
      files.map((f) => [f, Deno.readTextFileSync(join(base, f))]),
    );
    const r = rng(SEED);
    const dir = join(root, "case");
    Deno.mkdirSync(dir);
    for (const f of files) Deno.writeTextFileSync(join(dir, f), originals[f]!);
    let slowest = 0, refused = 0;
    for (let i = 0; i < CASES; i++) {
      const file = files[i % files.length]!;
      let text = originals[file]!;
      for (let m = 0, n = 1 + Math.floor(r() * 3); m < n; m++) text = mutate(text, r);
      Deno.writeTextFileSync(join(dir, file), text);
      const t0 = performance.now();
      try {
        readRunDir(dir);
      } catch (e) {
        refused++;
        assert.ok(e instanceof Error, `case ${i}: threw a non-Error ${String(e)}`);
        assert.ok(
          !(e instanceof RangeError && /call stack/.test(e.message)),
          `case ${i} (${file}) overflowed the stack`,
        );
        assert.match(e.message, new RegExp(`${file}|${dir}`), `case ${i}: ${e.message}`);
      }
      slowest = Math.max(slowest, performance.now() - t0);
      Deno.writeTextFileSync(join(dir, file), originals[file]!);
    }
    assert.ok(refused > CASES / 4, `only ${refused} of ${CASES} mutated records were refused`);
    // Generous: a case is a few ms; a reader that walks a deep value or a huge text per byte
    // many times over would take seconds.
    assert.ok(slowest < 5000, `slowest case took ${slowest.toFixed(0)} ms`);
  });
});

Deno.test("a record file larger than any record is refused by its size, before it is read", async () => {
  await withTempDir((root) => {
    const dir = writeRun(root, "a", baseSpec());
    const path = join(dir, "config.json");
    const f = Deno.openSync(path, { write: true, truncate: true });
    f.truncateSync(MAX_RECORD_BYTES.json + 1); // sparse: no memory or disk spent
    f.close();
    assert.throws(
      () => readRunDir(dir),
      new RegExp(`config\\.json: ${MAX_RECORD_BYTES.json + 1} bytes, more than the`),
    );
  });
});
