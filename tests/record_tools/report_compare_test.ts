/**
 * Tests of `dtrain report runA runB …` (record_tools/report_compare*.ts,
 * record_tools/report_script.ts, record_tools/smoothing.ts): the overlaid panels and their
 * notes, TensorBoard's smoothing, the `dtrain diff` findings at the top, a
 * self-contained page, the CLI, and a render in headless Chromium (skipped
 * with a reason when absent) whose smoothing control is moved.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { compareRuns } from "../../record_tools/compare.ts";
import { formatComparison } from "../../record_tools/diff.ts";
import { readRunDir } from "../../run_record/format.ts";
import { appendMetrics } from "../../run_record/record.ts";
import { DEFAULT_COMPARE_OUT, reportMain } from "../../record_tools/report.ts";
import { compareHtml } from "../../record_tools/report_compare.ts";
import {
  comparePanels,
  labelRuns,
  MAX_POINTS,
  runLabel,
  samplesSeen,
  thin,
} from "../../record_tools/report_compare_panels.ts";
import { DATA_ID, pageScript, scriptJson } from "../../record_tools/report_script.ts";
import { smoothEma } from "../../record_tools/smoothing.ts";
import { COLORS, escapeXml, pixelOf, type PlotScale } from "../../record_tools/svg_plot.ts";
import { chromiumMissing, near, probeResult, renderPage } from "./_chromium.ts";
import { countPixels, decodePng } from "./_png.ts";
import {
  baseSpec,
  metricsOf,
  type RunSpec,
  withTempDir,
  writeRun,
} from "../run_record/_fixtures.ts";

if (chromiumMissing) {
  console.warn(
    `tests/record_tools/report_compare_test.ts: ${chromiumMissing}, so the render test is skipped`,
  );
}

/** Runs reportMain and collects its exit code and output. */
async function runReport(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [], err: string[] = [];
  const code = await reportMain(args, (t) => out.push(t), (t) => err.push(t));
  return { code, out: out.join("\n"), err: err.join("\n") };
}

/** Three runs: A; B with another seed; C on one rank with twice the samples per step. */
function threeRuns(root: string, steps = 40): string[] {
  const a = baseSpec();
  a.steps = steps;
  a.epochs = 2;
  a.evalEvery = 10;
  a.loss = (s, seed) =>
    2.5 * Math.exp(-s / 12) + 0.2 + 0.25 * seed + 0.2 * Math.sin(s * 1.7 + seed);
  const b: RunSpec = {
    ...a,
    seed: 2,
    evalMetrics: (s, seed) => ({ accuracy: 0.6 + s / 200 + seed / 100 }),
  };
  const c: RunSpec = {
    ...a,
    worldSize: 1,
    samplesPerStep: 20,
    loss: (s) => 3 * Math.exp(-s / 25) + 0.5 + 0.3 * Math.cos(s * 2.3),
    evalMetrics: (s) => ({ accuracy: 0.5 + s / 100 }),
  };
  return [writeRun(root, "a", a), writeRun(root, "b", b), writeRun(root, "c", c)];
}

const labeled = (dirs: string[]) => labelRuns(dirs.map((dir) => ({ dir, r: readRunDir(dir) })));

Deno.test("smoothEma() is TensorBoard's debiased exponential moving average", () => {
  assert.deepEqual(smoothEma([1, 0, 1], 0.5), [1, 1 / 3, 0.625 / 0.875]);
  assert.deepEqual(
    smoothEma([3, 1, 4, 1], 0),
    [3, 1, 4, 1],
    "weight 0 leaves the values as they are",
  );
  assert.deepEqual(smoothEma([2, 2, 2], 0.9), [2, 2, 2], "a constant series stays constant");
  const withGap = smoothEma([1, NaN, 3, Infinity, 5], 0.6);
  assert.ok(Number.isNaN(withGap[1]) && withGap[3] === Infinity, "non-finite values pass through");
  // …and do not enter the average: the same as smoothing the finite values alone.
  const finite = smoothEma([1, 3, 5], 0.6);
  assert.deepEqual([withGap[0], withGap[2], withGap[4]], finite);
  // The first value is never pulled towards 0 (debiasing), and the mean is kept for noise.
  const noisy = Array.from({ length: 2000 }, (_, i) => 5 + (i % 2 === 0 ? 1 : -1));
  const s = smoothEma(noisy, 0.99);
  assert.equal(s[0], 6);
  assert.ok(Math.abs(s.at(-1)! - 5) < 0.02, `${s.at(-1)}`);
  assert.equal(smoothEma([], 0.6).length, 0);
});

Deno.test("runLabel(), thin() and samplesSeen() label runs, cap points and count samples", () => {
  assert.deepEqual([0, 1, 25, 26, 27, 701, 702].map(runLabel), [
    "A",
    "B",
    "Z",
    "AA",
    "AB",
    "ZZ",
    "AAA",
  ]);
  const xs = Array.from({ length: 10 }, (_, i) => i);
  assert.deepEqual(thin(xs, 20), { points: xs, every: 1 });
  assert.deepEqual(thin(xs, 4), { points: [0, 3, 6, 9], every: 3 });
  assert.deepEqual(thin(xs, 3), { points: [0, 4, 8, 9], every: 4 }, "the last point is kept");
  const spec = baseSpec();
  assert.deepEqual(samplesSeen(metricsOf(spec, 0, 0, 3)), { seen: [10, 20, 30], estimated: false });
  spec.samplesPerStep = null; // older writers: samplesPerS × stepMs
  const old = metricsOf(spec, 0, 0, 2);
  assert.deepEqual(samplesSeen(old), {
    seen: [Math.round(1000 * 20 / 1000), 20 + Math.round(1010 * 21 / 1000)],
    estimated: true,
  });
});

Deno.test("labelRuns() gives each run a colour, then dashes once the palette is used up", () => {
  const fake = (i: number) => ({ dir: `r${i}`, r: {} as never });
  const runs = labelRuns(Array.from({ length: COLORS.length + 2 }, (_, i) => fake(i)));
  assert.deepEqual(runs.slice(0, COLORS.length).map((x) => x.color), [...COLORS]);
  assert.ok(runs.slice(0, COLORS.length).every((x) => x.dash === undefined));
  assert.equal(runs[COLORS.length]!.color, COLORS[0]);
  assert.equal(runs[COLORS.length]!.dash, "6 3");
});

Deno.test("comparePanels() overlays the runs' final trajectories: by step, by samples seen, and each evaluation metric", async () => {
  await withTempDir((root) => {
    const dirs = threeRuns(root);
    // B resumed from step 30: its final trajectory takes attempt 1's steps 30…39.
    for (const m of metricsOf({ ...baseSpec(), steps: 40, epochs: 2, seed: 2 }, 1, 30, 40)) {
      appendMetrics(dirs[1]!, { ...m, loss: 0.25 });
    }
    const runs = labeled(dirs);
    const panels = comparePanels(runs, { lossScale: "auto", smoothing: 0.6 });
    assert.deepEqual(panels.map((p) => p.id), [
      "loss-step",
      "loss-samples",
      "lr",
      "grad-norm",
      "throughput",
      "eval-0",
      "eval-1",
    ]);
    assert.deepEqual(panels.map((p) => p.title).slice(4), [
      "Throughput (samples/s)",
      "Evaluation: accuracy",
      "Evaluation: val loss",
    ]);
    const loss = panels[0]!;
    assert.deepEqual(loss.data!.map((s) => [s.name, s.color, s.points.length]), [
      ["A", COLORS[0], 40],
      ["B", COLORS[1], 40],
      ["C", COLORS[2], 40],
    ]);
    assert.deepEqual(loss.data![1]!.points.slice(29, 31).map((p) => p[1]), [
      readRunDir(dirs[1]!).metrics[29]!.loss,
      0.25,
    ]);
    assert.match(loss.svg!, /data-smoothed="0\.6"/);
    assert.equal([...loss.svg!.matchAll(/data-role="raw"/g)].length, 3);
    assert.equal([...loss.svg!.matchAll(/data-role="smooth"/g)].length, 3);
    const bySamples = panels[1]!.data!;
    assert.deepEqual(bySamples[0]!.points.slice(0, 2).map((p) => p[0]), [10, 20]);
    assert.deepEqual(
      bySamples[2]!.points.slice(0, 2).map((p) => p[0]),
      [20, 40],
      "C: 20 samples a step",
    );
    assert.equal(panels[2]!.data, null, "the learning rate is not smoothed");
    assert.doesNotMatch(panels[2]!.svg!, /data-role/);
    // "val loss" was evaluated by A only (B and C define other metrics).
    assert.equal(panels[6]!.note, "not evaluated in run B, C");
    assert.equal([...panels[5]!.svg!.matchAll(/data-role="marker"/g)].length, 12);
    assert.equal(panels[0]!.note, null);
  });
});

Deno.test("comparePanels() notes what a run lacks, thins long runs and estimates samples for older files", async () => {
  await withTempDir((root) => {
    const a = baseSpec();
    a.steps = MAX_POINTS + 500;
    a.evalEvery = 0;
    const b = { ...a, gradNorm: false, samplesPerStep: null, tokens: true };
    const runs = labeled([writeRun(root, "a", a), writeRun(root, "b", b)]);
    const panels = comparePanels(runs, { lossScale: "linear", smoothing: 0 });
    const byId = Object.fromEntries(panels.map((p) => [p.id, p]));
    assert.equal(
      byId["grad-norm"]!.note,
      "grad norm not recorded in run B; run A: 1 point in 2 drawn (5000 at most)",
    );
    assert.equal(
      byId["loss-step"]!.data![0]!.points.length,
      (MAX_POINTS + 500) / 2 + 1,
      "every other point, and the last",
    );
    assert.match(
      byId["loss-samples"]!.note!,
      /run B: samples per step estimated as samplesPerS × stepMs/,
    );
    assert.equal(
      byId["throughput"]!.title,
      "Throughput (samples/s)",
      "tokens/s only when every run has it",
    );
    assert.deepEqual(byId["eval"], {
      id: "eval",
      title: "Evaluation",
      svg: null,
      note: "no evaluation lines in any run's metrics.jsonl",
      data: null,
    });
    assert.doesNotMatch(byId["loss-step"]!.svg!, /\(log\)/);
  });
});

Deno.test("compareHtml() puts dtrain diff's findings for each run against the first at the top, and is self-contained", async () => {
  await withTempDir((root) => {
    const dirs = threeRuns(root);
    const runs = labeled(dirs);
    const html = compareHtml(runs, comparePanels(runs, { lossScale: "auto", smoothing: 0.6 }), {
      lossTol: 1e-6,
      smoothing: 0.6,
    });
    // Offline: one inline script and one inline JSON block; no other scripts, links, fonts or URLs.
    assert.equal([...html.matchAll(/<script/g)].length, 2);
    assert.doesNotMatch(html, /<link|<img|<iframe|@import|url\(|@font-face|\ssrc=/i);
    const urls = [...html.matchAll(/https?:\/\/[^\s"'<]+/g)].map((m) => m[0]);
    assert.ok(
      urls.every((u) => u === "http://www.w3.org/2000/svg"),
      `only the SVG namespace, got ${urls}`,
    );
    // The findings come before the curves, run B's and run C's against A, in diff's own order.
    const diffAt = html.indexOf('<section id="diff-B">');
    assert.ok(diffAt > 0 && diffAt < html.indexOf("<h2>Curves</h2>"));
    for (const [i, label] of [[1, "B"], [2, "C"]] as const) {
      const c = compareRuns(runs[0]!.r, runs[i]!.r, { lossTol: 1e-6 });
      assert.ok(c.findings.length > 0);
      const section = html.slice(html.indexOf(`<section id="diff-${label}">`));
      const headlines = [
        ...section.slice(0, section.indexOf("</section>")).matchAll(
          /<li class="finding"><b>([^<]*)<\/b>/g,
        ),
      ].map((m) => m[1]);
      assert.deepEqual(headlines, c.findings.map((f) => escapeXml(f.headline)));
      assert.ok(
        section.includes(`<pre>${escapeXml(formatComparison(dirs[0]!, dirs[i]!, c))}</pre>`),
      );
    }
    assert.match(html, /B vs A: \d+ differences, most likely cause first/);
    assert.match(html, /seed 1 vs 2/);
    assert.match(html, /world size 2 vs 1/);
    assert.match(
      html,
      /<input type="range" id="smoothing" min="0" max="0.99" step="0.01" value="0.6">/,
    );
    const data = JSON.parse(
      /<script type="application\/json" id="plot-data">(.*?)<\/script>/s.exec(html)![1]!,
    );
    assert.deepEqual(Object.keys(data), ["loss-step", "loss-samples", "grad-norm", "throughput"]);
  });
});

Deno.test("scriptJson() and pageScript() keep the page's script intact", () => {
  const tricky = scriptJson({ s: "</script><!-- \u2028" });
  assert.doesNotMatch(tricky, /<|\u2028/);
  assert.deepEqual(JSON.parse(tricky), { s: "</script><!-- \u2028" });
  const script = pageScript();
  assert.doesNotMatch(script, /<\/script/i);
  assert.ok(script.includes(`getElementById("${DATA_ID}")`));
  // The embedded functions are the ones that drew the page (their source text).
  assert.ok(script.includes(smoothEma.toString()) && script.includes(pixelOf.toString()));
});

Deno.test("dtrain report with several runs writes the comparison and its SVG; bad arguments exit 2", async () => {
  await withTempDir(async (root) => {
    const dirs = threeRuns(root, 12);
    const out = join(root, "cmp.html");
    const r = await runReport([...dirs, "--out", out, "--smoothing", "0.8", "--loss-tol", "1e-3"]);
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out, `wrote ${out} and ${join(root, "cmp.svg")}`);
    const html = Deno.readTextFileSync(out);
    assert.match(html, /value="0\.8"/);
    assert.match(html, /relative tolerance 0\.001/);
    assert.match(Deno.readTextFileSync(join(root, "cmp.svg")), /data-plot="loss-samples"/);

    const bad = async (args: string[], re: RegExp) => {
      const x = await runReport(args);
      assert.equal(x.code, 2, args.join(" "));
      assert.match(x.err, re);
    };
    await bad([...dirs, "--smoothing", "1"], /--smoothing must be a number >= 0 and < 1, got "1"/);
    await bad([...dirs, "--smoothing", ""], /--smoothing must be a number/);
    await bad([...dirs, "--loss-tol=-1"], /--loss-tol must be a number >= 0, got "-1"/);
    await bad(
      [dirs[0]!, "--smoothing", "0.5"],
      /apply to a comparison: give two or more run directories/,
    );
    await bad(
      [dirs[0]!, join(root, "nope")],
      /nope is not a dtrain run directory: run\.json is missing/,
    );
    await bad([], /expected one or more run directories, got none/);

    // Without --out, the comparison lands in the current directory (a child process's, here).
    const cwd = Deno.makeTempDirSync({ dir: root });
    const child = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        join(import.meta.dirname!, "../../deno.json"),
        join(import.meta.dirname!, "../../cli.ts"),
        "report",
        ...dirs,
      ],
      cwd,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(child.code, 0, new TextDecoder().decode(child.stderr));
    assert.ok(Deno.statSync(join(cwd, DEFAULT_COMPARE_OUT)).isFile);
  });
});

/**
 * Measures the page from inside: every plot's box on the screen and its
 * lines as the browser parsed them; then moves the smoothing control to 0.9
 * and reads the redrawn smoothed lines of the loss plot.
 */
const PROBE = `<script>
const measure = () => [...document.querySelectorAll("svg[data-plot]")].map((svg) => {
  const r = svg.getBoundingClientRect();
  return {
    plot: svg.dataset.plot,
    box: [r.left + scrollX, r.top + scrollY, r.width, r.height],
    lines: [...svg.querySelectorAll("polyline")].map((p) => {
      const b = p.getBBox();
      return { series: p.dataset.series, role: p.dataset.role || null, n: p.points.numberOfItems, width: b.width, height: b.height };
    }),
  };
});
const before = measure();
const slider = document.getElementById("smoothing");
slider.value = "0.9";
slider.dispatchEvent(new Event("input"));
const smooth = [...document.querySelectorAll('svg[data-plot="loss-step"] polyline[data-role="smooth"]')]
  .map((p) => ({ series: p.dataset.series, points: p.getAttribute("points") }));
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify({ before, smooth, shown: document.getElementById("smoothing-value").textContent });
document.body.append(pre);
</script>`;

interface Probe {
  before: Array<{
    plot: string;
    box: [number, number, number, number];
    lines: Array<{ series: string; role: string | null; n: number; width: number; height: number }>;
  }>;
  smooth: Array<{ series: string; points: string }>;
  shown: string;
}

Deno.test({
  name:
    "dtrain report of three runs renders in headless Chromium: every run's line drawn, and the smoothing control redraws them",
  ignore: chromiumMissing !== null,
  async fn() {
    await withTempDir(async (root) => {
      const dirs = threeRuns(root);
      const html = join(root, "compare.html");
      assert.equal((await runReport([...dirs, "--out", html])).code, 0);
      const { dom, png } = await renderPage(html, PROBE, {
        workDir: root,
        width: 1000,
        height: 4200,
      });
      const probe = probeResult<Probe>(dom);
      assert.deepEqual(probe.before.map((p) => p.plot), [
        "loss-step",
        "loss-samples",
        "lr",
        "grad-norm",
        "throughput",
        "eval-0",
        "eval-1",
      ]);
      for (const p of probe.before) {
        const smoothed = !["lr", "eval-0", "eval-1"].includes(p.plot);
        const runs = p.plot === "eval-1" ? ["A"] : ["A", "B", "C"];
        const roles = smoothed ? ["raw", "smooth"] : [null];
        assert.deepEqual(
          p.lines.map((l) => `${l.series}/${l.role}`).sort(),
          runs.flatMap((s) => roles.map((r) => `${s}/${r}`)).sort(),
          `${p.plot}: one line per run and role`,
        );
        const n = p.plot.startsWith("eval") ? 4 : 40;
        for (const l of p.lines) {
          assert.equal(l.n, n, `${p.plot} ${l.series}: points parsed by the browser`);
          // (by samples seen, A and B span half the axis: C saw twice as many samples a step)
          assert.ok(l.width > 300, `${p.plot} ${l.series}: drawn ${l.width} px wide`);
        }
      }
      // The control moved to 0.9: the page's smoothed loss lines are exactly what the smoothing gives.
      assert.equal(probe.shown, "0.90");
      const page = Deno.readTextFileSync(html);
      const data = JSON.parse(
        /<script type="application\/json" id="plot-data">(.*?)<\/script>/s.exec(page)![1]!,
      );
      const scale: PlotScale = JSON.parse(
        /data-plot="loss-step"[^>]* data-scale="([^"]*)"/.exec(page)![1]!.replace(/&#34;/g, '"'),
      );
      const expected = data["loss-step"].map(
        (s: { name: string; points: Array<[number, number]> }) => {
          const ys = smoothEma(s.points.map((p) => p[1]), 0.9);
          return {
            series: s.name,
            points: s.points.map((p, i) => pixelOf(scale, p[0], ys[i]!).join(",")).join(" "),
          };
        },
      );
      assert.deepEqual(probe.smooth, expected);
      const initial = [
        ...page.matchAll(/<polyline data-series="(\w)" data-role="smooth"[^>]* points="([^"]*)"/g),
      ]
        .slice(0, 3).map((m) => m[2]);
      assert.ok(
        initial.every((pts, i) => pts !== expected[i].points),
        "the lines moved from their 0.6 positions",
      );

      // In the screenshot, every run's colour is drawn inside every plot where the runs differ.
      const img = decodePng(Deno.readFileSync(png));
      for (
        const p of probe.before.filter((p) =>
          ["loss-step", "loss-samples", "eval-0"].includes(p.plot)
        )
      ) {
        COLORS.slice(0, 3).forEach((color, i) => {
          const n = countPixels(img, near(color), p.box);
          assert.ok(n > 150, `${p.plot}: ${n} pixels of run ${"ABC"[i]}'s colour ${color}`);
        });
      }
      const loss = probe.before[0]!.box;
      assert.ok(
        countPixels(img, (r, g, b) => r + g + b < 720, loss) > 3000,
        "the loss plot is inked",
      );
    });
  },
});
