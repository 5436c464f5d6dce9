/**
 * Native code is reached only through ffi/: outside it no file opens a
 * library (`dlopen(`), calls through a function pointer (UnsafeFnPointer), or
 * reads a library's symbol table (`.symbols`), so every call
 * goes through ffi/'s checked wrappers (ffi/calls.ts, and NCCL's own
 * surface in ffi/nccl.ts) or its named helpers,
 * and a status is never checked by hand under a symbol name typed as a
 * string. tests/ and scripts/ are left out: they probe the libraries
 * themselves (symbol lists, raw CPU-against-GPU comparisons, benchmarks).
 * The scanner is proven on planted calls first.
 */
import assert from "node:assert/strict";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = fileURLToPath(new URL("../../", import.meta.url)).replace(/\/$/, "");

/** Folders not scanned: ffi/ itself, the tests and scripts (see above), and what is not source. */
const SKIPPED = new Set(["ffi", "tests", "scripts", "node_modules", "build", "dist", "runs"]);

/** The raw native accesses a line may hold: what each pattern finds. */
const PATTERNS: readonly [RegExp, string][] = [
  [/\bdlopen\s*\(/, "opens a library (dlopen)"],
  [/\bUnsafeFnPointer\b/, "calls through a function pointer (UnsafeFnPointer)"],
  [/[\w$#)\]]\s*\??\.\s*symbols\b/, "reads a library's symbol table (.symbols)"],
];

/** One raw native access: file, 1-based line, what it does, the line's text. */
export interface NativeCallSite {
  file: string;
  line: number;
  what: string;
  text: string;
}

/** Every raw native access in `files` (repository path → text) outside the skipped folders. */
export function rawNativeCalls(files: ReadonlyMap<string, string>): NativeCallSite[] {
  const found: NativeCallSite[] = [];
  for (const [file, text] of files) {
    if (SKIPPED.has(file.split("/")[0]!)) continue;
    text.split("\n").forEach((line, i) => {
      for (const [re, what] of PATTERNS) {
        if (re.test(line)) found.push({ file, line: i + 1, what, text: line.trim() });
      }
    });
  }
  return found;
}

/** Every TypeScript file of the repository outside the skipped folders, by repository path. */
function repositorySources(): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (dir: string) => {
    for (const e of Deno.readDirSync(dir)) {
      const path = join(dir, e.name);
      const rel = relative(REPO, path);
      if (e.isDirectory) {
        if (!e.name.startsWith(".") && !SKIPPED.has(rel)) walk(path);
      } else if (e.isFile && /\.(ts|tsx|js|mjs)$/.test(e.name)) {
        out.set(rel, Deno.readTextFileSync(path));
      }
    }
  };
  walk(REPO);
  return out;
}

Deno.test("the scanner finds planted raw native calls and ignores ffi/ and the checked wrappers", () => {
  const planted = new Map([
    ["tensor/planted.ts", "const s = lib.symbols.dt_scale(out, inp, n, 2, null);"],
    [
      "distributed/planted.ts",
      "const lib = Deno.dlopen(path, { f: { parameters: [], result: 'i32' } });",
    ],
    ["random/planted.ts", "const f = this.#lib.symbols[name];"],
    ["launch/planted.ts", "const p = new Deno.UnsafeFnPointer(ptr, def);"],
    ["nn/planted.ts", "if (cuda().symbols?.dt_cuda_event_query) {}"],
    ["optim/planted.ts", "const s = this.#lib.symbols;"],
    [
      "distributed/backends/planted.ts",
      "const r = lib.symbols.ncclAllReduce(a, b, n, 7, 0, c, s);",
    ],
    // allowed: ffi/ owns the libraries; checked wrappers and named helpers are the convention
    ["ffi/planted.ts", "lib.symbols.dt_shm_abort(handle, status, reason);"],
    ["tensor/fine.ts", "backend().call.dt_scale(out, inp, n, 2); shmCalls().dt_shm_close(h);"],
    ["distributed/fine.ts", "if (nccl.ncclAllReduce(a, b, n, 7, 0, c, s) === 'in-progress') {}"],
    ["profile/fine.ts", "const top = [...symbols.entries()];"],
  ]);
  const found = rawNativeCalls(planted);
  assert.deepEqual(
    found.map((f) => f.file),
    [
      "tensor/planted.ts",
      "distributed/planted.ts",
      "random/planted.ts",
      "launch/planted.ts",
      "nn/planted.ts",
      "optim/planted.ts",
      "distributed/backends/planted.ts",
    ],
  );
  assert.match(found[1]!.what, /dlopen/);
  assert.match(found[3]!.what, /UnsafeFnPointer/);
});

Deno.test("no file outside ffi/ calls a native library by its symbols or opens one", () => {
  const found = rawNativeCalls(repositorySources());
  assert.deepEqual(
    found.map((f) => `${f.file}:${f.line} ${f.what}: ${f.text}`),
    [],
    "call these through ffi/ (a checked wrapper of ffi/calls.ts, ffi/nccl.ts's ncclCalls(), " +
      "or a named helper in ffi/)",
  );
});
