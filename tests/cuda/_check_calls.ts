/**
 * A source check of kernels/cuda: every CUDA runtime and cuBLAS(Lt) call
 * sits inside a check macro (DT_CHECK_CUDA, DT_CHECK_CUDA_ALLOW,
 * DT_CHECK_CUBLAS, DT_CHECK_CUBLAS_ANSWER: a status the caller acts on), every kernel launch goes through DT_LAUNCH (so the GPU
 * and the emulated device build from one source) and is followed at once by
 * DT_CHECK_LAUNCH. Comments and string literals are blanked first, so
 * symbol names in dlsym strings or prose do not count.
 */

/** Functions that report no status, so there is nothing to check. */
export const UNCHECKED_ALLOWED: Readonly<Record<string, string>> = {
  cudaGetErrorString: "returns the text of an error code",
  cudaGetErrorName: "returns the name of an error code",
  cudaGetLastError: "reads and clears the error state: it is the check itself",
  cudaPeekAtLastError: "reads the error state without clearing it",
  cublasLtGetStatusString: "returns the text of a status code",
  cublasLtGetVersion: "returns a version number",
};

const CHECK_MACROS =
  /\bDT_CHECK_(?:CUDA|CUDA_ALLOW|CUDA_WORK|CUBLAS|CUBLAS_ALLOW|CUBLAS_ANSWER)\s*\(/g;
const CALL = /\b((?:cuda|cublas)[A-Za-z0-9_]*)\s*\((?!\s*\*)/g;
const LAUNCH = /\bDT_LAUNCH\s*\(/g;
const RAW_LAUNCH = /<<</g;

/** Replaces comments and the insides of string and char literals with spaces (offsets kept). */
export function blankCommentsAndStrings(src: string): string {
  let out = "";
  let i = 0;
  while (i < src.length) {
    const two = src.slice(i, i + 2);
    if (two === "/*") {
      const end = src.indexOf("*/", i + 2);
      const stop = end < 0 ? src.length : end + 2;
      out += src.slice(i, stop).replace(/[^\n]/g, " ");
      i = stop;
    } else if (two === "//") {
      const end = src.indexOf("\n", i);
      const stop = end < 0 ? src.length : end;
      out += " ".repeat(stop - i);
      i = stop;
    } else if (src[i] === '"' || src[i] === "'") {
      const quote = src[i];
      let j = i + 1;
      while (j < src.length && src[j] !== quote) j += src[j] === "\\" ? 2 : 1;
      out += quote + " ".repeat(Math.max(0, j - i - 1)) + (j < src.length ? quote : "");
      i = j + 1;
    } else {
      out += src[i];
      i++;
    }
  }
  return out;
}

/** Index just past the parenthesis that closes the one opening at `open`. */
function closingParen(src: string, open: number): number {
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    if (src[i] === "(") depth++;
    else if (src[i] === ")" && --depth === 0) return i + 1;
  }
  return src.length;
}

function lineOf(src: string, at: number): number {
  return src.slice(0, at).split("\n").length;
}

/** One unchecked call or launch: file, line and what. */
export interface Finding {
  file: string;
  line: number;
  what: string;
}

/**
 * The calls and launches of one source file that escape the check macros.
 *
 * @example
 * ```ts
 * uncheckedCalls("x.cu", "void f() { cudaFree(p); }"); // [{ file: "x.cu", line: 1, what: "cudaFree(...)" }]
 * ```
 */
export function uncheckedCalls(file: string, source: string): Finding[] {
  const src = blankCommentsAndStrings(source);
  const spans: [number, number][] = [];
  for (const m of src.matchAll(CHECK_MACROS)) {
    const open = m.index! + m[0].length - 1;
    spans.push([open, closingParen(src, open)]);
  }
  const inside = (at: number) => spans.some(([a, b]) => at > a && at < b);
  const findings: Finding[] = [];
  for (const m of src.matchAll(CALL)) {
    const name = m[1]!;
    if (name.endsWith("_t") || name in UNCHECKED_ALLOWED) continue;
    // the line that defines a macro is not a call
    const lineStart = src.lastIndexOf("\n", m.index!) + 1;
    if (/^\s*#/.test(src.slice(lineStart, m.index!))) continue;
    if (!inside(m.index!)) {
      findings.push({
        file,
        line: lineOf(src, m.index!),
        what: `${name}(...) outside a check macro`,
      });
    }
  }
  for (const m of src.matchAll(LAUNCH)) {
    const lineStart = src.lastIndexOf("\n", m.index!) + 1;
    if (/^\s*#/.test(src.slice(lineStart, m.index!))) continue; /* the macro's definition */
    const end = closingParen(src, m.index! + m[0].length - 1);
    const after = src.slice(end).trimStart();
    if (!after.startsWith(";") || !after.slice(1).trimStart().startsWith("DT_CHECK_LAUNCH(")) {
      findings.push({
        file,
        line: lineOf(src, m.index!),
        what: "kernel launch not followed by DT_CHECK_LAUNCH",
      });
    }
  }
  for (const m of src.matchAll(RAW_LAUNCH)) {
    const lineStart = src.lastIndexOf("\n", m.index!) + 1;
    const line = src.slice(lineStart, src.indexOf("\n", m.index!));
    if (/^\s*#\s*define\s+DT_LAUNCH\b/.test(line)) continue; /* the one place <<< may appear */
    findings.push({
      file,
      line: lineOf(src, m.index!),
      what: "raw <<<...>>> launch: launch kernels with DT_LAUNCH",
    });
  }
  return findings;
}
