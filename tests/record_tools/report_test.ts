/**
 * Tests of record_tools/report.ts: the panels and notes, a self-contained page, the
 * CLI, and a render in headless Chromium (skipped with a reason when
 * /usr/bin/chromium is absent) that checks every plot is drawn.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { readRunDir } from "../../run_record/format.ts";
import { appendEval, appendMetrics } from "../../run_record/record.ts";
import { reportHtml, reportMain } from "../../record_tools/report.ts";
import { reportPanels } from "../../record_tools/report_panels.ts";
import { COLORS } from "../../record_tools/svg_plot.ts";
import { countPixels, decodePng } from "./_png.ts";
import { chromiumMissing, near, probeResult, renderPage } from "./_chromium.ts";
import { baseSpec, evalsOf, metricsOf, withTempDir, writeRun } from "../run_record/_fixtures.ts";

const PLOTS = ["loss", "lr", "grad-norm", "loss-scale", "throughput", "step-time"];

/** Runs reportMain and collects its exit code and output. */
async function runReport(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [], err: string[] = [];
  const code = await reportMain(args, (t) => out.push(t), (t) => err.push(t));
  return { code, out: out.join("\n"), err: err.join("\n") };
}

/** Number of points of each polyline in `html`, by plot id. */
function pointsPerPlot(html: string): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const svg of html.matchAll(/<svg [^>]*data-plot="([^"]+)"[\s\S]*?<\/svg>/g)) {
    out[svg[1]!] = [...svg[0].matchAll(/<polyline [^>]*points="([^"]*)"/g)].map((m) =>
      m[1]!.trim().split(/\s+/).length
    );
  }
  return out;
}

Deno.test("reportPanels() plots every quantity per step, and notes the quantities that were not recorded", async () => {
  await withTempDir((root) => {
    const full = baseSpec();
    full.lossScale = true;
    full.tokens = true;
    const r = readRunDir(writeRun(root, "full", full));
    const panels = reportPanels(r);
    assert.deepEqual(panels.map((p) => p.id), [...PLOTS, "eval"]);
    assert.ok(panels.slice(0, -1).every((p) => p.svg !== null && p.note === null));
    assert.match(panels[4]!.svg!, /tokens\/s/);
    assert.match(panels[3]!.svg!, /loss scale \(log\)/);
    assert.deepEqual(pointsPerPlot(panels.map((p) => p.svg).join("\n"))["step-time"], [12, 12, 12]);

    const bare = baseSpec();
    bare.gradNorm = false;
    bare.stepMsByRank = false;
    const notes = reportPanels(readRunDir(writeRun(root, "bare", bare))).map((p) => p.note);
    assert.deepEqual(notes, [
      null,
      null,
      "grad norm not recorded (null in every step)",
      "loss scale not recorded (null in every step: no mixed-precision scaler)",
      null,
      "step time per rank not recorded (no stepMsByRank in metrics.jsonl)",
      "no evaluation lines in metrics.jsonl",
    ]);
  });
});

Deno.test("reportPanels() draws one line per attempt for a resumed run, and a log loss axis when asked", async () => {
  await withTempDir((root) => {
    const dir = writeRun(root, "a", baseSpec());
    for (const m of metricsOf(baseSpec(), 1, 8, 16)) appendMetrics(dir, m);
    const panels = reportPanels(readRunDir(dir), "log");
    assert.match(panels[0]!.svg!, /loss \(log\)/);
    assert.deepEqual(pointsPerPlot(panels[0]!.svg!).loss, [12, 8]);
    assert.match(panels[0]!.svg!, />loss, attempt 1<\/text>/);
    assert.doesNotMatch(reportPanels(readRunDir(dir), "linear")[0]!.svg!, /\(log\)/);
  });
});

Deno.test("reportPanels() plots each evaluation metric with a dot per evaluation, one line per attempt", async () => {
  await withTempDir((root) => {
    const spec = baseSpec();
    spec.evalEvery = 4;
    const dir = writeRun(root, "a", spec);
    for (const e of evalsOf(spec, 1, 8, 16)) appendEval(dir, e);
    const panels = reportPanels(readRunDir(dir)).filter((p) => p.id.startsWith("eval"));
    assert.deepEqual(panels.map((p) => [p.id, p.title]), [
      ["eval-0", "Evaluation: accuracy"],
      ["eval-1", "Evaluation: val loss"],
    ]);
    const svg = panels[0]!.svg!;
    assert.deepEqual(
      pointsPerPlot(svg)["eval-0"],
      [3, 2],
      "attempt 0 at steps 3, 7, 11; attempt 1 at 11, 15",
    );
    assert.equal([...svg.matchAll(/data-role="marker"/g)].length, 5);
    assert.match(svg, />accuracy, attempt 1<\/text>/);
  });
});

Deno.test("reportHtml() is self-contained: no scripts, links, external URLs or fonts", async () => {
  await withTempDir((root) => {
    const r = readRunDir(writeRun(root, "a", baseSpec()));
    const html = reportHtml(r, reportPanels(r));
    assert.ok(html.startsWith("<!doctype html>"));
    assert.doesNotMatch(html, /<script|<link|<img|<iframe|@import|url\(|@font-face|\ssrc=/i);
    const urls = [...html.matchAll(/https?:\/\/[^\s"'<]+/g)].map((m) => m[0]);
    assert.ok(
      urls.every((u) => u === "http://www.w3.org/2000/svg"),
      `only the SVG namespace, got ${urls}`,
    );
    assert.match(html, /dtrain --nproc 2 --run-dir \S+ train\.ts --epochs 3/);
    assert.match(html, /sha256 <code>3fa10+<\/code>/);
    assert.match(html, /DTRAIN_NUM_THREADS=1/);
    assert.match(html, /native CPU a321783a1a851864/);
    assert.equal(
      [...html.matchAll(/<tr><td>\d+<\/td><td>\d+<\/td><td>20<\/td>/g)].length,
      6,
      "6 data-order rows",
    );
  });
});

Deno.test("reportMain writes the HTML and a standalone SVG, and notes missing files", async () => {
  await withTempDir(async (root) => {
    const dir = writeRun(root, "a", baseSpec());
    Deno.removeSync(join(dir, "data_order.jsonl"));
    const r = await runReport([dir]);
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out, `wrote ${join(dir, "report.html")} and ${join(dir, "report.svg")}`);
    const html = Deno.readTextFileSync(join(dir, "report.html"));
    assert.match(html, /<li>data_order\.jsonl is missing<\/li>/);
    const svg = Deno.readTextFileSync(join(dir, "report.svg"));
    assert.deepEqual(pointsPerPlot(svg), pointsPerPlot(html));
    assert.deepEqual(
      Object.keys(pointsPerPlot(svg)),
      PLOTS.filter((p) => p !== "loss-scale"),
      "the SVG holds the drawn plots",
    );
    const out = join(root, "custom.html");
    assert.equal((await runReport([dir, "--out", out])).code, 0);
    assert.ok(Deno.statSync(join(root, "custom.svg")).isFile);
  });
});

Deno.test("reportMain exits 2 for bad arguments and a directory without run.json", async () => {
  await withTempDir(async (root) => {
    assert.equal((await runReport([])).code, 2);
    const scale = await runReport([root, "--loss-scale", "cubic"]);
    assert.equal(scale.code, 2);
    assert.match(scale.err, /--loss-scale must be auto, log or linear, got "cubic"/);
    const none = await runReport([root]);
    assert.equal(none.code, 2);
    assert.match(none.err, /is not a dtrain run directory: run\.json is missing/);
  });
});

if (chromiumMissing) {
  console.warn(
    `tests/record_tools/report_test.ts: ${chromiumMissing}, so the render test is skipped`,
  );
}

/**
 * Measures every plot from inside the page: the number of points the SVG
 * parser read from each polyline and its rendered bounding box.
 */
const PROBE = `<script>
const plots = [...document.querySelectorAll("svg[data-plot]")].map((svg) => ({
  plot: svg.dataset.plot,
  lines: [...svg.querySelectorAll("polyline")].map((p) => {
    const box = p.getBBox();
    return { n: p.points.numberOfItems, width: box.width, height: box.height };
  }),
}));
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify(plots);
document.body.append(pre);
</script>`;

Deno.test({
  name: "dtrain report renders in headless Chromium with every plot drawn",
  ignore: chromiumMissing !== null,
  async fn() {
    await withTempDir(async (root) => {
      const spec = baseSpec();
      spec.lossScale = true;
      spec.steps = 30;
      const dir = writeRun(root, "a", spec);
      const html = join(root, "report.html");
      assert.equal((await runReport([dir, "--out", html])).code, 0);
      const { dom, png } = await renderPage(html, PROBE, {
        workDir: root,
        width: 1000,
        height: 3200,
      });
      const plots: Array<
        { plot: string; lines: Array<{ n: number; width: number; height: number }> }
      > = probeResult(dom);
      assert.deepEqual(plots.map((p) => p.plot), PLOTS);
      for (const p of plots) {
        const expected = p.plot === "step-time" ? [30, 30, 30] : [30];
        assert.deepEqual(
          p.lines.map((l) => l.n),
          expected,
          `${p.plot}: points parsed by the browser`,
        );
        for (const l of p.lines) {
          assert.ok(l.width > 400 && l.height > 50, `${p.plot}: drawn ${l.width}×${l.height} px`);
        }
      }

      const img = decodePng(Deno.readFileSync(png));
      assert.deepEqual([img.width, img.height], [1000, 3200]);
      const inked = countPixels(img, (r, g, b) => r + g + b < 600);
      assert.ok(inked > 0.01 * img.width * img.height, `${inked} non-white pixels`);
      // Each of the 6 plots draws its first series in COLORS[0] across ~540 px.
      const blue = countPixels(img, near(COLORS[0]));
      assert.ok(blue > 6 * 400, `${blue} pixels of the first series colour`);
      assert.ok(countPixels(img, near(COLORS[1])) > 300, "the step-time median line is drawn");
      assert.ok(countPixels(img, near(COLORS[2])) > 300, "the step-time min line is drawn");
    });
  },
});
