/**
 * Tests of record_tools/svg_plot.ts: tick choice and labels, the mapping of points
 * to the plot area (linear and log), gaps, escaping, and stacking.
 */
import assert from "node:assert/strict";
import {
  escapeXml,
  formatTick,
  linePlot,
  logTicks,
  niceTicks,
  type Series,
  stackPlots,
} from "../../record_tools/svg_plot.ts";

/** The (x, y) pairs of every polyline in `svg`, one array per polyline. */
function polylines(svg: string): Array<{ series: string; points: number[][] }> {
  return [...svg.matchAll(/<polyline data-series="([^"]*)"[^>]* points="([^"]*)"/g)].map((m) => ({
    series: m[1]!,
    points: m[2]!.split(" ").map((p) => p.split(",").map(Number)),
  }));
}

const plot = (series: Series[], logY = false) =>
  linePlot({
    id: "t",
    title: "T",
    xLabel: "step",
    yLabel: "y",
    series,
    logY,
    width: 400,
    height: 200,
  });

Deno.test("niceTicks() picks 1, 2 or 5 × 10^k steps that cover the range", () => {
  assert.deepEqual(niceTicks(0, 97), [0, 20, 40, 60, 80, 100]);
  assert.deepEqual(niceTicks(0.1, 0.43), [0.1, 0.2, 0.3, 0.4, 0.5]);
  assert.deepEqual(niceTicks(0.1, 0.43, 4), [0, 0.2, 0.4, 0.6]);
  assert.deepEqual(niceTicks(-3, 3, 7), [-3, -2, -1, 0, 1, 2, 3]);
  assert.deepEqual(niceTicks(2.3101, 2.3104, 4), [2.3101, 2.3102, 2.3103, 2.3104]);
  assert.deepEqual(niceTicks(5, 5), [5]);
});

Deno.test("logTicks() gives powers of ten, with 2 and 5 between them over short ranges", () => {
  assert.deepEqual(logTicks(0.15, 2.6), [0.2, 0.5, 1, 2]);
  assert.deepEqual(logTicks(1e-3, 1e5), [0.001, 0.1, 10, 1000, 100000]);
  assert.deepEqual(logTicks(16384, 65536), [20000, 50000]);
  assert.ok(logTicks(3, 4).length >= 2, "a range inside one mantissa step still gets two ticks");
});

Deno.test("formatTick() writes short labels: digits, or an exponent for tiny and huge values", () => {
  assert.equal(formatTick(0), "0");
  assert.equal(formatTick(0.30000000000000004), "0.3");
  assert.equal(formatTick(2.3104), "2.3104");
  assert.equal(formatTick(0.0008), "0.0008");
  assert.equal(formatTick(2e-5), "2e-5");
  assert.equal(formatTick(262144), "262144");
  assert.equal(formatTick(65536 * 64), "4.19e6");
  assert.equal(formatTick(-1500), "-1500");
});

Deno.test("linePlot() draws one polyline per series with every point inside the plot area", () => {
  const a: Series = { name: "a", points: [[0, 1], [1, 3], [2, 2], [3, 5]] };
  const b: Series = { name: "b", points: [[0, 0], [3, 1]] };
  const svg = plot([a, b]);
  assert.match(
    svg,
    /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" data-plot="t" width="400" height="200"/,
  );
  const lines = polylines(svg);
  assert.deepEqual(lines.map((l) => [l.series, l.points.length]), [["a", 4], ["b", 2]]);
  for (const { points } of lines) {
    for (const [x, y] of points) {
      assert.ok(x! >= 70 && x! <= 384 && y! >= 30 && y! <= 158, `(${x}, ${y}) inside the axes`);
    }
  }
  const [p0, p1, p2, p3] = lines[0]!.points as [number[], number[], number[], number[]];
  assert.ok(p0[0]! < p1[0]! && p1[0]! < p2[0]! && p2[0]! < p3[0]!, "x grows to the right");
  assert.ok(p1[1]! < p0[1]! && p3[1]! < p1[1]! && p2[1]! > p1[1]!, "larger y is drawn higher");
  assert.match(svg, /<g class="legend">/, "two series get a legend");
  assert.ok(svg.includes(">a</text>") && svg.includes(">b</text>"));
});

Deno.test("linePlot() places ticks so a known value lands on its tick line", () => {
  const svg = plot([{ name: "s", points: [[0, 0], [10, 100]] }]);
  const yOf100 = Number(/<text x="64" y="([\d.]+)" text-anchor="end">100<\/text>/.exec(svg)![1]) -
    4;
  const last = polylines(svg)[0]!.points[1]!;
  assert.equal(last[1], yOf100);
  const xOf10 = Number(/<text x="([\d.]+)" y="174" text-anchor="middle">10<\/text>/.exec(svg)![1]);
  assert.equal(last[0], xOf10);
});

Deno.test("linePlot() breaks a series at missing values and leaves non-positive values out of a log plot", () => {
  const points: Array<[number, number]> = [
    [0, 1],
    [1, 2],
    [2, NaN],
    [3, 4],
    [4, 5],
    [5, Infinity],
    [6, 7],
  ];
  const lines = polylines(plot([{ name: "s", points }]));
  assert.deepEqual(lines.map((l) => l.points.length), [2, 2]);
  const svg = plot([{ name: "s", points }]);
  assert.equal(
    [...svg.matchAll(/<circle data-series="s"/g)].length,
    1,
    "the isolated last point is a dot",
  );
  const log = plot([{ name: "s", points: [[0, 10], [1, 0], [2, -1], [3, 100], [4, 1000]] }], true);
  assert.deepEqual(polylines(log).map((l) => l.points.length), [2]);
  assert.match(log, /y \(log\)<\/text>/);
  const spaced =
    polylines(plot([{ name: "s", points: [[0, 1], [1, 10], [2, 100]] }], true))[0]!.points;
  assert.ok(
    Math.abs((spaced[0]![1]! - spaced[1]![1]!) - (spaced[1]![1]! - spaced[2]![1]!)) < 0.02,
    "decades are equally spaced",
  );
});

Deno.test("linePlot() says so when nothing can be drawn, and handles a constant series", () => {
  assert.match(plot([{ name: "s", points: [[0, NaN]] }]), /no drawable values/);
  assert.match(plot([]), /no drawable values/);
  const flat = polylines(plot([{ name: "s", points: [[0, 3], [1, 3], [2, 3]] }]))[0]!.points;
  assert.equal(new Set(flat.map((p) => p[1])).size, 1);
});

Deno.test("linePlot() escapes titles, labels and series names", () => {
  const svg = linePlot({
    id: `x"y`,
    title: "<b>&",
    xLabel: "a<b",
    yLabel: "y",
    series: [{ name: `"n"`, points: [[0, 1], [1, 2]] }],
  });
  assert.ok(svg.includes(`data-plot="x&#34;y"`));
  assert.ok(svg.includes(">&#60;b&#62;&#38;</text>"));
  assert.ok(svg.includes(`data-series="&#34;n&#34;"`));
  assert.equal(escapeXml(`<'&">`), "&#60;&#39;&#38;&#34;&#62;");
});

Deno.test("stackPlots() places plots one below the other in one standalone SVG", () => {
  const p1 = linePlot({
    id: "a",
    title: "A",
    xLabel: "x",
    yLabel: "y",
    series: [{ name: "s", points: [[0, 1], [1, 2]] }],
    width: 300,
    height: 100,
  });
  const p2 = linePlot({
    id: "b",
    title: "B",
    xLabel: "x",
    yLabel: "y",
    series: [{ name: "s", points: [[0, 1], [1, 2]] }],
    width: 500,
    height: 150,
  });
  const doc = stackPlots([p1, p2]);
  assert.match(
    doc,
    /^<\?xml version="1\.0" encoding="UTF-8"\?>\n<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" width="500" height="250" viewBox="0 0 500 250">/,
  );
  assert.match(doc, /<svg x="0" y="0" xmlns="[^"]+" data-plot="a"/);
  assert.match(doc, /<svg x="0" y="100" xmlns="[^"]+" data-plot="b"/);
  assert.ok(doc.trimEnd().endsWith("</svg>\n</svg>"));
});
