/**
 * `dtrain report <run-dir>`: a self-contained HTML page (inline CSS and SVG,
 * no scripts, fonts or network) with the run's record, one plot per
 * quantity per step, and the data-order digests; the plots also go to a
 * standalone SVG file beside it. With several run directories it writes
 * their comparison instead (report_compare.ts).
 */
import { basename, dirname, extname, join } from "node:path";
import { parseArgs } from "node:util";
import { finalSteps, readRunDir, type RunDir } from "../run_record/format.ts";
import { type Panel, reportPanels } from "./report_panels.ts";
import { compareHtml } from "./report_compare.ts";
import { comparePanels, labelRuns } from "./report_compare_panels.ts";
import { DEFAULT_LOSS_TOL } from "./diff.ts";
import { tolText } from "./findings.ts";
import { escapeXml, stackPlots } from "./svg_plot.ts";

const CSS = `body{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;font-size:13px}
th{background:#f3f3f3}code{font-size:12px;word-break:break-all}.note{color:#666;font-style:italic}figure{margin:12px 0}
.failed{color:#b00}.succeeded{color:#070}`;

const td = (s: string) => `<td>${s}</td>`;
const code = (s: string) => `<code>${escapeXml(s)}</code>`;

function table(header: string[] | null, rows: string[][]): string {
  return [
    "<table>",
    header === null ? "" : `<tr>${header.map((h) => `<th>${escapeXml(h)}</th>`).join("")}</tr>`,
    ...rows.map((r) => `<tr>${r.map(td).join("")}</tr>`),
    "</table>",
  ].join("\n");
}

/** Quotes an argument for a POSIX shell when it needs it. */
function shellQuote(a: string): string {
  return /^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`;
}

function runTable(r: RunDir): string {
  const run = r.run;
  const v = run.versions;
  const w = run.world;
  const rows: Array<[string, string]> = [
    ["status", `<b class="${run.status}">${escapeXml(run.status)}</b>`],
    ["run id", code(run.runId)],
    ["created / ended", `${escapeXml(run.createdAt)} / ${escapeXml(run.endedAt ?? "—")}`],
    ["command", code(run.command.argv.map(shellQuote).join(" "))],
    ["working directory", code(run.command.cwd)],
    ["script", `${code(run.script.path)}<br>sha256 ${code(run.script.sha256)}`],
    [
      "world",
      `${w.worldSize} ranks = ${w.nnodes} node(s) × ${w.nprocPerNode}; hosts ${
        escapeXml(w.hosts.join(", ") || "—")
      }`,
    ],
    [
      "versions",
      [
        `dtrain ${v.dtrain}`,
        `Deno ${v.deno}`,
        `V8 ${v.v8}`,
        `TypeScript ${v.typescript}`,
        `native CPU ${v.native.cpu ?? "—"}`,
        ...(v.native.cuda ? [`native CUDA ${v.native.cuda}`] : []),
        ...(v.cuda
          ? [
            `CUDA runtime ${v.cuda.runtime}, driver ${v.cuda.driver}, GPUs ${
              v.cuda.gpus.join(", ")
            }`,
          ]
          : []),
        ...(v.nccl ? [`NCCL ${v.nccl}`] : []),
      ].map(escapeXml).join("<br>"),
    ],
  ];
  if (run.machine) {
    const m = run.machine;
    rows.push([
      "machine",
      escapeXml(
        `${m.hostname}: ${m.cpuModel}, ${m.cpus} cpus, ${
          (m.memBytes / 2 ** 30).toFixed(1)
        } GiB, ${m.os} ${m.arch}`,
      ),
    ]);
  }
  const env = Object.entries(run.env).map(([k, val]) => code(`${k}=${val}`)).join("<br>");
  rows.push([
    "environment",
    env || `<span class="note">none of the recorded variables was set</span>`,
  ]);
  if (r.config) {
    rows.push(["seed / device", escapeXml(`${r.config.seed} / ${r.config.device}`)]);
    rows.push(["config", `<code>${escapeXml(JSON.stringify(r.config.config))}</code>`]);
  }
  return table(null, rows.map(([k, val]) => [`<b>${escapeXml(k)}</b>`, val]));
}

function attemptsTable(r: RunDir): string {
  if (r.run.attempts.length === 0) return `<p class="note">no attempt has started</p>`;
  const dash = (x: unknown) => x === null ? "—" : escapeXml(String(x));
  return table(
    ["attempt", "started", "ended", "exit code", "signal", "failing rank", "reason"],
    r.run.attempts.map((
      a,
    ) => [
      String(a.attempt),
      dash(a.startedAt),
      dash(a.endedAt),
      dash(a.exitCode),
      dash(a.signal),
      dash(a.failingRank),
      dash(a.reason),
    ]),
  );
}

/** Rows shown in the data-order table; the rest are counted. */
const MAX_ORDER_ROWS = 500;

function dataOrderTable(r: RunDir): string {
  if (r.missing.includes("data_order.jsonl")) {
    return `<p class="note">data_order.jsonl is missing</p>`;
  }
  if (r.dataOrder.length === 0) return `<p class="note">no data-order digests recorded</p>`;
  const rows = r.dataOrder.slice(0, MAX_ORDER_ROWS).map((
    d,
  ) => [
    String(d.epoch),
    String(d.rank),
    String(d.count),
    code(d.sha256),
    code(d.first.join(", ")),
  ]);
  const more = r.dataOrder.length - rows.length;
  return table(["epoch", "rank", "count", "sha256 of indices (int32 LE)", "first indices"], rows) +
    (more > 0 ? `\n<p class="note">… and ${more} more rows in data_order.jsonl</p>` : "");
}

/** The whole report page for run directory `r`. */
export function reportHtml(r: RunDir, panels: readonly Panel[]): string {
  const steps = finalSteps(r.metrics);
  const last = steps.at(-1);
  const notes = [...r.missing.map((f) => `${f} is missing`), ...r.warnings];
  return [
    "<!doctype html>",
    `<html lang="en"><head><meta charset="utf-8"><title>dtrain report: ${
      escapeXml(r.run.runId)
    }</title>`,
    `<style>${CSS}</style></head><body>`,
    `<h1>dtrain run ${escapeXml(r.run.name || r.run.runId)}</h1>`,
    last
      ? `<p>${steps.length} steps logged; last step ${last.step}, loss ${
        last.loss.toPrecision(6)
      }, ${last.skipped} skipped</p>`
      : "",
    notes.length > 0
      ? `<ul class="note">${notes.map((n) => `<li>${escapeXml(n)}</li>`).join("")}</ul>`
      : "",
    "<h2>Run</h2>",
    runTable(r),
    "<h2>Attempts</h2>",
    attemptsTable(r),
    "<h2>Per step</h2>",
    ...panels.map((p) =>
      p.svg !== null
        ? `<figure id="plot-${p.id}">${p.svg}</figure>`
        : `<figure id="plot-${p.id}"><b>${escapeXml(p.title)}</b><p class="note">${
          escapeXml(p.note ?? "")
        }</p></figure>`
    ),
    "<h2>Data order</h2>",
    dataOrderTable(r),
    "</body></html>",
    "",
  ].join("\n");
}

/** The smoothing control's initial weight when --smoothing is not given (TensorBoard's default). */
export const DEFAULT_SMOOTHING = 0.6;
/** Where a comparison is written when --out is not given (in the current directory). */
export const DEFAULT_COMPARE_OUT = "report-compare.html";

const USAGE = `usage: dtrain report <run-dir> [--out report.html] [--loss-scale auto|log|linear]
       dtrain report <run-a> <run-b> [<run-c> …] [--out ${DEFAULT_COMPARE_OUT}]
              [--smoothing ${DEFAULT_SMOOTHING}] [--loss-tol ${
  tolText(DEFAULT_LOSS_TOL)
}] [--loss-scale auto|log|linear]

One run: a self-contained HTML report (default <run-dir>/report.html) and the
same plots as a standalone SVG beside it (report.svg).
Several runs: one page (default ./${DEFAULT_COMPARE_OUT}, and an SVG beside it)
with what \`dtrain diff\` finds between the first run and each other one, and
their curves laid over each other: loss by step and by samples seen, learning
rate, gradient norm, throughput and evaluation metrics.
  --smoothing W   initial weight of the page's smoothing control, 0 <= W < 1 (default ${DEFAULT_SMOOTHING})
  --loss-tol X    relative loss tolerance of the diff findings (default ${
  tolText(DEFAULT_LOSS_TOL)
})`;

/**
 * Runs `dtrain report` with the arguments after the verb; resolves to the
 * exit code (0 written, 2 bad arguments or run directory).
 *
 * @example
 * ```ts
 * Deno.exit(await reportMain(["runs/20251129-093000-train-3fa2", "--out", "/tmp/r.html"]));
 * Deno.exit(await reportMain(["runs/a", "runs/b", "--smoothing", "0.9"]));
 * ```
 */
export function reportMain(
  args: string[],
  print: (text: string) => void = console.log,
  printError: (text: string) => void = console.error,
): Promise<number> {
  // Synchronous inside; the Promise is the shape every dtrain verb has.
  return Promise.resolve(report(args, print, printError));
}

/** The value of a number option that passes `ok`, `fallback` when absent, or an error text. */
function numberOption(
  raw: string | undefined,
  name: string,
  fallback: number,
  ok: (v: number) => boolean,
  range: string,
): number | string {
  if (raw === undefined) return fallback;
  const v = Number(raw);
  return raw.trim() !== "" && Number.isFinite(v) && ok(v)
    ? v
    : `--${name} must be a number ${range}, got ${JSON.stringify(raw)}`;
}

function report(
  args: string[],
  print: (text: string) => void,
  printError: (text: string) => void,
): number {
  let values, positionals;
  try {
    ({ values, positionals } = parseArgs({
      args,
      options: {
        out: { type: "string" },
        "loss-scale": { type: "string" },
        smoothing: { type: "string" },
        "loss-tol": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      allowPositionals: true,
    }));
  } catch (e) {
    printError(`dtrain report: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    print(USAGE);
    return 0;
  }
  if (positionals.length === 0) {
    printError(`dtrain report: expected one or more run directories, got none\n${USAGE}`);
    return 2;
  }
  const scale = values["loss-scale"] ?? "auto";
  if (scale !== "auto" && scale !== "log" && scale !== "linear") {
    printError(
      `dtrain report: --loss-scale must be auto, log or linear, got ${JSON.stringify(scale)}`,
    );
    return 2;
  }
  const smoothing = numberOption(
    values.smoothing,
    "smoothing",
    DEFAULT_SMOOTHING,
    (v) => v >= 0 && v < 1,
    ">= 0 and < 1",
  );
  if (typeof smoothing === "string") {
    printError(`dtrain report: ${smoothing}`);
    return 2;
  }
  const lossTol = numberOption(
    values["loss-tol"],
    "loss-tol",
    DEFAULT_LOSS_TOL,
    (v) => v >= 0,
    ">= 0",
  );
  if (typeof lossTol === "string") {
    printError(`dtrain report: ${lossTol}`);
    return 2;
  }
  if (positionals.length === 1 && (values.smoothing ?? values["loss-tol"]) !== undefined) {
    printError(
      "dtrain report: --smoothing and --loss-tol apply to a comparison: give two or more run directories",
    );
    return 2;
  }
  const runs: Array<{ dir: string; r: RunDir }> = [];
  for (const dir of positionals) {
    try {
      runs.push({ dir, r: readRunDir(dir) });
    } catch (e) {
      printError(`dtrain report: ${(e as Error).message}`);
      return 2;
    }
  }
  const out = values.out ??
    (runs.length === 1 ? join(runs[0]!.dir, "report.html") : DEFAULT_COMPARE_OUT);
  const svgOut = join(dirname(out), `${basename(out, extname(out))}.svg`);
  if (svgOut === out) {
    printError(`dtrain report: --out ${out} would be overwritten by the SVG: give an .html path`);
    return 2;
  }
  let html: string, svgs: string[];
  if (runs.length === 1) {
    const panels = reportPanels(runs[0]!.r, scale);
    html = reportHtml(runs[0]!.r, panels);
    svgs = panels.flatMap((p) => p.svg === null ? [] : [p.svg]);
  } else {
    const labeled = labelRuns(runs);
    const panels = comparePanels(labeled, { lossScale: scale, smoothing });
    html = compareHtml(labeled, panels, { lossTol, smoothing });
    svgs = panels.flatMap((p) => p.svg === null ? [] : [p.svg]);
  }
  try {
    Deno.writeTextFileSync(out, html);
    Deno.writeTextFileSync(svgOut, stackPlots(svgs));
  } catch (e) {
    printError(`dtrain report: cannot write the report: ${(e as Error).message}`);
    return 2;
  }
  print(`wrote ${out} and ${svgOut}`);
  return 0;
}
