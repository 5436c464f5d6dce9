/**
 * Source checks that keep the two kernel libraries on one set of shared code
 * (no compiler needed): CUDA sources take their per-element arithmetic from
 * kernels/common (no libm call of their own), the error machinery is defined
 * once in kernels/common/dt_error.h, the argument checks of the kernel ABI
 * (and their texts) live in kernels/common/dt_checks.h, and the host-only
 * vectorisation header stays with the CPU library. Each scanner is also run
 * on a snippet it must flag, so the checks can fail.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { KERNEL_SYMBOLS } from "../../ffi/symbols.ts";
import { blankCommentsAndStrings } from "./_check_calls.ts";

const KERNELS = fileURLToPath(new URL("../../kernels/", import.meta.url));

/** [path relative to kernels/, text] of every source under kernels/<dir>. */
function sources(dir: string, exts: string[]): [string, string][] {
  const out: [string, string][] = [];
  const walk = (rel: string) => {
    for (const e of Deno.readDirSync(KERNELS + rel)) {
      const path = `${rel}/${e.name}`;
      if (e.isDirectory) walk(path);
      else if (exts.some((x) => e.name.endsWith(x))) {
        out.push([path, Deno.readTextFileSync(KERNELS + path)]);
      }
    }
  };
  walk(dir);
  return out.sort(([a], [b]) => a.localeCompare(b));
}

const lineOf = (src: string, at: number) => src.slice(0, at).split("\n").length;

/** C math library functions (float and double forms) that round or classify. */
const LIBM = [
  "exp",
  "exp2",
  "expm1",
  "log",
  "log2",
  "log10",
  "log1p",
  "sqrt",
  "rsqrt",
  "cbrt",
  "pow",
  "tanh",
  "sinh",
  "cosh",
  "sin",
  "cos",
  "tan",
  "asin",
  "acos",
  "atan",
  "atan2",
  "erf",
  "erfc",
  "lgamma",
  "tgamma",
  "hypot",
  "fmax",
  "fmin",
  "fabs",
  "floor",
  "ceil",
  "round",
  "trunc",
  "rint",
  "nearbyint",
  "fmod",
  "remainder",
  "ldexp",
  "frexp",
  "copysign",
];
const LIBM_CALL = new RegExp(
  `\\b((?:__)?(?:${LIBM.join("|")})f?|isnan|isinf|isfinite|signbit)\\s*\\(`,
  "g",
);

/** "file:line: name(...)" for every libm call in a source (comments and strings ignored). */
export function libmCalls(file: string, source: string): string[] {
  const src = blankCommentsAndStrings(source);
  return [...src.matchAll(LIBM_CALL)].map((m) => `${file}:${lineOf(src, m.index!)}: ${m[1]}(...)`);
}

Deno.test("no CUDA source calls a libm function: arithmetic comes from kernels/common", () => {
  const cuda = sources("cuda", [".cu", ".cuh"]);
  assert.ok(cuda.length >= 8, `expected the CUDA sources, found ${cuda.length}`);
  assert.deepEqual(cuda.flatMap(([f, s]) => libmCalls(f, s)), []);
});

Deno.test("libmCalls() flags libm calls and ignores comments, strings and dt_ names", () => {
  const snippet = [
    "float a = expf(x) + logf(y);   // expf(z) in a comment",
    'const char* t = "sqrtf(2)";',
    "if (isnan(v)) w = fmaxf(w, v) + dt_expf(v) + my_exp(v);",
    "double l = log(sum);",
  ].join("\n");
  assert.deepEqual(libmCalls("k.cu", snippet), [
    "k.cu:1: expf(...)",
    "k.cu:1: logf(...)",
    "k.cu:3: isnan(...)",
    "k.cu:3: fmaxf(...)",
    "k.cu:4: log(...)",
  ]);
});

/** Definitions of the error machinery outside kernels/common/dt_error.h. */
export function errorMachinery(file: string, source: string): string[] {
  const src = blankCommentsAndStrings(source);
  const found: string[] = [];
  const patterns: [RegExp, string][] = [
    [/\bdt_status\s+(dt_fail_|dt_shm_fail_|dt_with_context_)\s*\([^;{]*\)\s*\{/g, "defines $1"],
    [/#\s*define\s+(DT_REQUIRE_|DT_TRY_)\b/g, "defines the macro $1"],
    [/__thread\s+char\s+(\w+)\s*\[/g, "keeps its own error buffer $1"],
    [/thread_local\s+char\s+(\w+)\s*\[/g, "keeps its own error buffer $1"],
  ];
  for (const [re, what] of patterns) {
    for (const m of src.matchAll(re)) {
      found.push(`${file}:${lineOf(src, m.index!)}: ${what.replace("$1", m[1]!)}`);
    }
  }
  return found;
}

Deno.test("the dt_fail_ machinery is defined once, in kernels/common/dt_error.h", () => {
  // dtrain's own libraries (the emulated CUDA runtime and the stand-ins for
  // cuBLASLt and NCCL keep the error state of the libraries they emulate)
  const all = ["common", "cpu", "cuda", "shm"].flatMap((d) =>
    sources(d, [".c", ".cu", ".h", ".cuh"])
  )
    .filter(([f]) => f !== "common/dt_error.h");
  assert.deepEqual(all.flatMap(([f, s]) => errorMachinery(f, s)), []);
  // each library's runtime emits the shared definitions exactly once
  for (const dir of ["cpu", "cuda", "shm"]) {
    const owners = sources(dir, [".c", ".cu"])
      .filter(([, s]) => /#\s*define\s+DT_ERROR_DEFINE\b/.test(blankCommentsAndStrings(s)))
      .map(([f]) => f);
    assert.equal(owners.length, 1, `kernels/${dir}: DT_ERROR_DEFINE in [${owners.join(", ")}]`);
  }
  assert.deepEqual(
    errorMachinery("x.c", "static __thread char text_[1024];\n#define DT_REQUIRE_(c, ...) x"),
    ["x.c:2: defines the macro DT_REQUIRE_", "x.c:1: keeps its own error buffer text_"],
  );
});

/** Failures that only one library can have (device limits, the CPU's ISA
 * setting), so their checks stay in that library's own sources. */
const ONE_LIBRARY_CHECKS: Readonly<Record<string, string>> = {
  "dt_gemm: cuBLASLt has no algorithm": "an answer of cuBLASLt's heuristic",
  "dt_gemm: batch = %lld exceeds cuBLASLt's limit": "cuBLASLt counts batches in int32",
  "dt_transpose_0213: B=%lld is too large for the tiled transpose": "the grid's y extent",
  "dt_gemm: DTRAIN_CPU_ISA=%s is not supported": "the CPU library's choice of micro-kernel",
};

Deno.test("the kernel ABI's argument checks and their texts live in kernels/common/dt_checks.h", () => {
  const names = Object.keys(KERNEL_SYMBOLS);
  const texts = /(?:DT_REQUIRE_\([^"]*|dt_fail_\(\s*DT_ERR_ARG\s*,\s*)"(dt_\w+): ([^"]*)"/g;
  const offenders: string[] = [];
  for (const [file, src] of sources(".", [".c", ".cu", ".h", ".cuh"])) {
    if (file.startsWith("./common/")) continue;
    for (const m of src.matchAll(texts)) {
      const [symbol, rest] = [m[1]!, m[2]!];
      if (!names.includes(symbol)) continue;
      if (Object.keys(ONE_LIBRARY_CHECKS).some((t) => `${symbol}: ${rest}`.startsWith(t))) continue;
      offenders.push(`${file}:${lineOf(src, m.index!)}: "${symbol}: ${rest}"`);
    }
  }
  assert.deepEqual(offenders, []);
});

Deno.test("dt_vectorize.h is the CPU library's own: in kernels/cpu and included only there", () => {
  assert.throws(() => Deno.statSync(KERNELS + "common/dt_vectorize.h"));
  assert.ok(Deno.statSync(KERNELS + "cpu/dt_vectorize.h").isFile);
  const users = sources(".", [".c", ".cu", ".h", ".cuh", ".cpp"])
    .filter(([f, s]) => !f.startsWith("./cpu/") && /#\s*include\s*"dt_vectorize\.h"/.test(s))
    .map(([f]) => f);
  assert.deepEqual(users, []);
});
