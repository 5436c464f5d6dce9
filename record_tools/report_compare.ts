/**
 * The page of `dtrain report runA runB [runC …]`: the runs side by side,
 * what `dtrain diff` finds between the first run and each other one, and
 * their curves laid over each other with a smoothing control. One
 * self-contained file: inline CSS, SVG and one inline script, no network.
 */
import { compareRuns, type Comparison } from "./compare.ts";
import { formatComparison } from "./diff.ts";
import { tolText } from "./findings.ts";
import { finalEvals, finalSteps } from "../run_record/format.ts";
import type { ComparePanel, LabeledRun } from "./report_compare_panels.ts";
import { DATA_ID, pageScript, scriptJson, SLIDER_ID, SLIDER_VALUE_ID } from "./report_script.ts";
import { escapeXml } from "./svg_plot.ts";

const CSS = `body{font-family:sans-serif;margin:0 24px 24px;color:#222;max-width:960px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;font-size:13px}
th{background:#f3f3f3}code{font-size:12px;word-break:break-all}.note{color:#666;font-style:italic}figure{margin:12px 0}
.failed{color:#b00}.succeeded{color:#070}.swatch{display:inline-block;width:22px;height:0;border-top:3px solid;vertical-align:middle;margin-right:6px}
.controls{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #ddd;z-index:1}
.finding{margin:6px 0}.evidence{color:#444;font-size:13px;margin-left:12px}.check{color:#555;font-size:13px;margin-left:12px}
pre{font-size:12px;background:#f7f7f7;padding:8px;overflow-x:auto}`;

const td = (s: string) => `<td>${s}</td>`;
const code = (s: string) => `<code>${escapeXml(s)}</code>`;

function swatch(x: LabeledRun): string {
  const dash = x.dash ? "dashed" : "solid";
  return `<span class="swatch" style="border-top-color:${x.color};border-top-style:${dash}"></span><b>${
    escapeXml(x.label)
  }</b>`;
}

function runsTable(runs: readonly LabeledRun[]): string {
  const header = [
    "run",
    "directory",
    "status",
    "world",
    "seed / device",
    "steps",
    "last loss",
    "last evaluation",
  ];
  const rows = runs.map((x) => {
    const r = x.r;
    const steps = finalSteps(r.metrics);
    const last = steps.at(-1);
    const evals = [...finalEvals(r.evals)].map(([name, pts]) =>
      `${name} ${pts.at(-1)![1].toPrecision(4)} (step ${pts.at(-1)![0]})`
    );
    return [
      swatch(x),
      `${code(x.dir)}<br>${code(r.run.runId)}`,
      `<b class="${r.run.status}">${
        escapeXml(r.run.status)
      }</b>, ${r.run.attempts.length} attempt(s)`,
      escapeXml(
        `${r.run.world.worldSize} rank(s) = ${r.run.world.nnodes} × ${r.run.world.nprocPerNode}`,
      ),
      r.config ? escapeXml(`${r.config.seed} / ${r.config.device}`) : "—",
      last ? escapeXml(`${steps.length} (last ${last.step})`) : "none",
      last ? escapeXml(last.loss.toPrecision(6)) : "—",
      evals.length > 0 ? escapeXml(evals.join("; ")) : "—",
    ];
  });
  return [
    "<table>",
    `<tr>${header.map((h) => `<th>${escapeXml(h)}</th>`).join("")}</tr>`,
    ...rows.map((r) => `<tr>${r.map(td).join("")}</tr>`),
    "</table>",
  ].join("\n");
}

/** One run's `dtrain diff` against the first run, as HTML, with the same text as the command's behind a toggle. */
function diffSection(a: LabeledRun, b: LabeledRun, c: Comparison): string {
  const n = c.findings.length;
  const head = n === 0
    ? `${b.label} vs ${a.label}: runs agree (compared: ${c.compared.join(", ")})`
    : `${b.label} vs ${a.label}: ${n} difference${n === 1 ? "" : "s"}, most likely cause first`;
  const items = c.findings.map((f) =>
    `<li class="finding"><b>${escapeXml(f.headline)}</b>${
      f.evidence.map((e) => `<div class="evidence">${escapeXml(e)}</div>`).join("")
    }<div class="check">check: ${escapeXml(f.check)}</div></li>`
  );
  return [
    `<section id="diff-${escapeXml(b.label)}">`,
    `<h3>${escapeXml(head)}</h3>`,
    items.length > 0 ? `<ol>${items.join("\n")}</ol>` : "",
    c.notes.length > 0
      ? `<ul class="note">${c.notes.map((x) => `<li>${escapeXml(x)}</li>`).join("")}</ul>`
      : "",
    `<details><summary>as <code>dtrain diff ${escapeXml(a.dir)} ${
      escapeXml(b.dir)
    }</code> prints it</summary><pre>${
      escapeXml(formatComparison(a.dir, b.dir, c))
    }</pre></details>`,
    "</section>",
  ].join("\n");
}

/** Options of compareHtml(). */
export interface CompareHtmlOptions {
  /** relative loss tolerance of the `dtrain diff` findings */
  lossTol: number;
  /** the smoothing control's initial value (the panels were drawn with it) */
  smoothing: number;
}

/**
 * The whole comparison page for `runs` (at least two; the first is the
 * baseline each other run is diffed against) and their panels.
 */
export function compareHtml(
  runs: readonly LabeledRun[],
  panels: readonly ComparePanel[],
  opts: CompareHtmlOptions,
): string {
  const [base, ...others] = runs;
  if (base === undefined || others.length === 0) {
    throw new RangeError(`a comparison needs two or more runs, got ${runs.length}`);
  }
  const diffs = others.map((b) => diffSection(base, b, compareRuns(base.r, b.r, opts)));
  const warnings = runs.flatMap((x) => [
    ...x.r.missing.map((f) => `run ${x.label}: ${f} is missing`),
    ...x.r.warnings.map((w) => `run ${x.label}: ${w}`),
  ]);
  const data = Object.fromEntries(panels.flatMap((p) => p.data ? [[p.id, p.data]] : []));
  const w = opts.smoothing;
  return [
    "<!doctype html>",
    `<html lang="en"><head><meta charset="utf-8"><title>dtrain report: ${runs.length} runs</title>`,
    `<style>${CSS}</style></head><body>`,
    `<h1>dtrain: ${runs.length} runs compared</h1>`,
    warnings.length > 0
      ? `<ul class="note">${warnings.map((x) => `<li>${escapeXml(x)}</li>`).join("")}</ul>`
      : "",
    "<h2>Runs</h2>",
    runsTable(runs),
    `<h2>What differs (<code>dtrain diff</code> against run ${escapeXml(base.label)})</h2>`,
    `<p class="note">losses compared with relative tolerance ${tolText(opts.lossTol)}</p>`,
    ...diffs,
    "<h2>Curves</h2>",
    `<div class="controls"><label for="${SLIDER_ID}">smoothing</label> ` +
    `<input type="range" id="${SLIDER_ID}" min="0" max="0.99" step="0.01" value="${w}"> ` +
    `<output id="${SLIDER_VALUE_ID}">${w.toFixed(2)}</output> ` +
    `<span class="note">TensorBoard's exponential moving average; the faded lines are the raw values. ` +
    `Each run's line is its final trajectory (a resumed step counts once).</span> ` +
    runs.map(swatch).join(" "),
    "</div>",
    ...panels.map((p) => {
      const note = p.note ? `<p class="note">${escapeXml(p.note)}</p>` : "";
      return p.svg !== null
        ? `<figure id="plot-${p.id}">${p.svg}${note}</figure>`
        : `<figure id="plot-${p.id}"><b>${escapeXml(p.title)}</b>${note}</figure>`;
    }),
    `<script type="application/json" id="${DATA_ID}">${scriptJson(data)}</script>`,
    `<script>${pageScript()}</script>`,
    "</body></html>",
    "",
  ].join("\n");
}
