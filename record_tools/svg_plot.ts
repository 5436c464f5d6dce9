/**
 * A small SVG line-plot builder for `dtrain report`: nice axis ticks (linear
 * or log), one polyline per series, broken where a value is missing or
 * cannot be drawn, optionally smoothed over a faded raw line, a legend, and
 * stacking of plots into one standalone SVG.
 */
import { smoothEma } from "./smoothing.ts";

/** One line: (x, y) points in x order; a non-finite y leaves a gap. */
export interface Series {
  name: string;
  points: ReadonlyArray<readonly [number, number]>;
  /** its colour (default: COLORS by position) */
  color?: string;
  /** an SVG stroke-dasharray, e.g. "6 3" (default: solid) */
  dash?: string;
}

/** What to draw. */
export interface PlotOptions {
  /** goes into data-plot="…", so tests and readers can find the plot */
  id: string;
  title: string;
  xLabel: string;
  yLabel: string;
  series: readonly Series[];
  /** log10 y axis; points with y <= 0 leave a gap */
  logY?: boolean;
  /**
   * Draw each series twice: its raw values faded, and smoothed with this
   * TensorBoard EMA weight in [0, 1) on top (record_tools/smoothing.ts).
   */
  smoothing?: number;
  /** a dot at every point (for sparse series such as evaluations) */
  markers?: boolean;
  width?: number;
  height?: number;
}

/**
 * Where a plot's data land in its SVG: x = [min, max, left px, right px],
 * y = [min, max, bottom px, top px]. Written into the plot's data-scale
 * attribute, so the page's script (and a test) can place new points.
 */
export interface PlotScale {
  x: [number, number, number, number];
  y: [number, number, number, number];
  logY: boolean;
}

/**
 * The pixel position of data point (x, y) in a plot of scale `s`.
 * Self-contained: its source text also runs in the report page.
 */
export function pixelOf(s: PlotScale, x: number, y: number): [number, number] {
  const f = (v: number) => s.logY ? Math.log10(v) : v;
  const px = s.x[2] + ((x - s.x[0]) / (s.x[1] - s.x[0] || 1)) * (s.x[3] - s.x[2]);
  const py = s.y[2] - ((f(y) - f(s.y[0])) / (f(s.y[1]) - f(s.y[0]) || 1)) * (s.y[2] - s.y[3]);
  return [Math.round(px * 100) / 100, Math.round(py * 100) / 100];
}

/** Line colours, in series order (colour-blind-safe Okabe–Ito palette). */
export const COLORS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"] as const;

const MARGIN = { left: 70, right: 16, top: 30, bottom: 42 };

/** Escapes text for XML content and attribute values. */
export function escapeXml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/**
 * About `maxTicks` round tick values (1, 2 or 5 × 10^k apart) covering
 * [lo, hi].
 *
 * @example
 * ```ts
 * niceTicks(0, 97); // → [0, 20, 40, 60, 80, 100]
 * ```
 */
export function niceTicks(lo: number, hi: number, maxTicks = 6): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, maxTicks - 1);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw * (1 - 1e-9)) ?? 10 * mag;
  const first = Math.floor(lo / step + 1e-9);
  const last = Math.ceil(hi / step - 1e-9);
  const ticks: number[] = [];
  // Multiplying the integer index keeps values free of accumulated rounding.
  for (let i = first; i <= last; i++) ticks.push(Number((i * step).toPrecision(12)));
  return ticks;
}

/**
 * Tick values for a log axis over [lo, hi] (both > 0): powers of ten, plus
 * 2 and 5 times them when fewer than three powers fit, thinned to at most
 * `maxTicks` when many decades are spanned.
 */
export function logTicks(lo: number, hi: number, maxTicks = 8): number[] {
  const a = Math.floor(Math.log10(lo));
  const b = Math.ceil(Math.log10(hi));
  const mantissas = b - a < 3 ? [1, 2, 5] : [1];
  const ticks: number[] = [];
  for (let e = a; e <= b; e++) {
    for (const m of mantissas) ticks.push(Number((m * 10 ** e).toPrecision(12)));
  }
  const inRange = ticks.filter((t) => t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9));
  const shown = inRange.length >= 2 ? inRange : ticks.filter((t) => t >= lo / 10 && t <= hi * 10);
  const every = Math.ceil(shown.length / maxTicks);
  return shown.filter((_, i) => i % every === 0);
}

/** A short label for a tick value: plain digits, or an exponent for very large or small values. */
export function formatTick(v: number): string {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-4) return v.toExponential(2).replace(/\.?0+e/, "e").replace("e+", "e");
  return String(Number(v.toPrecision(6)));
}

/**
 * Splits points into runs of drawable points (finite, and > 0 on a log
 * axis). Self-contained: its source text also runs in the report page.
 */
export function segments(
  points: ReadonlyArray<readonly [number, number]>,
  logY: boolean,
): Array<Array<readonly [number, number]>> {
  const out: Array<Array<readonly [number, number]>> = [];
  let current: Array<readonly [number, number]> = [];
  for (const p of points) {
    const ok = Number.isFinite(p[0]) && Number.isFinite(p[1]) && (!logY || p[1] > 0);
    if (ok) current.push(p);
    else if (current.length > 0) {
      out.push(current);
      current = [];
    }
  }
  if (current.length > 0) out.push(current);
  return out;
}

/** [min, max] of values, widened when empty of spread so a scale can be made. */
function extent(values: number[], logY: boolean): [number, number] {
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (lo === hi) {
    if (logY) [lo, hi] = [lo / 2, hi * 2];
    else [lo, hi] = lo === 0 ? [-1, 1] : [lo - Math.abs(lo) / 10, hi + Math.abs(hi) / 10];
  }
  return [lo, hi];
}

const px = (v: number) => String(Math.round(v * 100) / 100);

/** The points of `s` smoothed with weight `w` (x unchanged). */
export function smoothed(
  s: ReadonlyArray<readonly [number, number]>,
  w: number,
): Array<readonly [number, number]> {
  const ys = smoothEma(s.map((p) => p[1]), w);
  return s.map((p, i) => [p[0], ys[i]!] as const);
}

/**
 * One line plot as an `<svg>` element (with xmlns, so it also stands alone).
 * Each drawable run of a series is one `<polyline data-series="name">`
 * (an isolated point is a `<circle>`); a plot with nothing drawable says so.
 * With `smoothing`, the raw runs are `data-role="raw"` and faded, and the
 * smoothed runs `data-role="smooth"` are drawn on top.
 *
 * @example
 * ```ts
 * linePlot({ id: "loss", title: "Loss", xLabel: "step", yLabel: "loss",
 *   series: [{ name: "loss", points: [[0, 2.3], [1, 2.1]] }], logY: true });
 * ```
 */
export function linePlot(opts: PlotOptions): string {
  const width = opts.width ?? 640;
  const height = opts.height ?? 260;
  const logY = opts.logY ?? false;
  const drawn = opts.series.map((s) => segments(s.points, logY));
  const pts = drawn.flat(2);
  const head = (scale: string) =>
    `<svg xmlns="http://www.w3.org/2000/svg" data-plot="${
      escapeXml(opts.id)
    }" width="${width}" height="${height}" ` +
    `viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11"${scale}>`;
  const out = [
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="${MARGIN.left}" y="18" font-size="13" font-weight="bold">${
      escapeXml(opts.title)
    }</text>`,
  ];
  if (pts.length === 0) {
    out.unshift(head(""));
    out.push(
      `<text x="${width / 2}" y="${
        height / 2
      }" text-anchor="middle" fill="#666">no drawable values</text>`,
      "</svg>",
    );
    return out.join("\n");
  }
  const [x0, x1] = extent(pts.map((p) => p[0]), false);
  const [yLo, yHi] = extent(pts.map((p) => p[1]), logY);
  const xTicks = niceTicks(x0, x1, 8);
  const yTicks = logY ? logTicks(yLo, yHi) : niceTicks(yLo, yHi, 6);
  // The axes span the ticks, so every tick lies on the plot.
  const xMin = Math.min(x0, xTicks[0]!), xMax = Math.max(x1, xTicks.at(-1)!);
  const yMin = Math.min(yLo, yTicks[0]!), yMax = Math.max(yHi, yTicks.at(-1)!);
  const left = MARGIN.left,
    right = width - MARGIN.right,
    top = MARGIN.top,
    bottom = height - MARGIN.bottom;
  const scale: PlotScale = {
    x: [xMin, xMax, left, right],
    y: [yMin, yMax, bottom, top],
    logY,
  };
  const smoothingAttr = opts.smoothing === undefined ? "" : ` data-smoothed="${opts.smoothing}"`;
  out.unshift(head(` data-scale="${escapeXml(JSON.stringify(scale))}"${smoothingAttr}`));
  const sx = (x: number) => pixelOf(scale, x, yMin)[0];
  const sy = (y: number) => pixelOf(scale, xMin, y)[1];

  out.push(`<g class="axes" stroke="#999" stroke-width="1">`);
  out.push(`<line x1="${left}" y1="${bottom}" x2="${right}" y2="${bottom}"/>`);
  out.push(`<line x1="${left}" y1="${top}" x2="${left}" y2="${bottom}"/>`);
  for (const t of xTicks) {
    out.push(`<line x1="${px(sx(t))}" y1="${bottom}" x2="${px(sx(t))}" y2="${bottom + 4}"/>`);
  }
  for (const t of yTicks) {
    out.push(
      `<line x1="${left - 4}" y1="${px(sy(t))}" x2="${right}" y2="${px(sy(t))}" stroke="#eee"/>`,
    );
  }
  out.push(`</g>`, `<g class="ticks" fill="#333">`);
  for (const t of xTicks) {
    out.push(
      `<text x="${px(sx(t))}" y="${bottom + 16}" text-anchor="middle">${formatTick(t)}</text>`,
    );
  }
  for (const t of yTicks) {
    out.push(
      `<text x="${left - 6}" y="${px(sy(t) + 4)}" text-anchor="end">${formatTick(t)}</text>`,
    );
  }
  out.push(`</g>`);
  out.push(
    `<text x="${(left + right) / 2}" y="${height - 8}" text-anchor="middle">${
      escapeXml(opts.xLabel)
    }</text>`,
  );
  out.push(
    `<text x="14" y="${(top + bottom) / 2}" text-anchor="middle" transform="rotate(-90 14 ${
      (top + bottom) / 2
    })">` +
      `${escapeXml(opts.yLabel)}${logY ? " (log)" : ""}</text>`,
  );

  const smoothing = opts.smoothing;
  opts.series.forEach((s, i) => {
    const color = s.color ?? COLORS[i % COLORS.length]!;
    const name = escapeXml(s.name);
    const dash = s.dash ? ` stroke-dasharray="${escapeXml(s.dash)}"` : "";
    const line = (seg: ReadonlyArray<readonly [number, number]>, role: string, style: string) => {
      if (seg.length === 1) {
        const [cx, cy] = pixelOf(scale, seg[0]![0], seg[0]![1]);
        return `<circle data-series="${name}"${role} cx="${cx}" cy="${cy}" r="2" fill="${color}"${style}/>`;
      }
      const points = seg.map(([x, y]) => pixelOf(scale, x, y).join(",")).join(" ");
      return `<polyline data-series="${name}"${role} fill="none" stroke="${color}" stroke-width="1.5"${dash}${style} points="${points}"/>`;
    };
    if (smoothing === undefined) {
      for (const seg of drawn[i]!) out.push(line(seg, "", ""));
    } else {
      for (const seg of drawn[i]!) out.push(line(seg, ` data-role="raw"`, ` opacity="0.25"`));
      for (const seg of segments(smoothed(s.points, smoothing), logY)) {
        out.push(line(seg, ` data-role="smooth"`, ""));
      }
    }
    if (opts.markers) {
      for (const [x, y] of drawn[i]!.flat()) {
        const [cx, cy] = pixelOf(scale, x, y);
        out.push(
          `<circle data-series="${name}" data-role="marker" cx="${cx}" cy="${cy}" r="2.5" fill="${color}"/>`,
        );
      }
    }
  });
  if (opts.series.length > 1) out.push(legend(opts.series, right));
  out.push("</svg>");
  return out.join("\n");
}

/** A one-row legend in the title line, right-aligned at `right` (text width estimated at 6.5 px a character). */
function legend(series: readonly Series[], right: number): string {
  const out: string[] = [];
  let x = right;
  for (let i = series.length - 1; i >= 0; i--) {
    const name = series[i]!.name;
    x -= 22 + Math.ceil(6.5 * name.length);
    const color = series[i]!.color ?? COLORS[i % COLORS.length];
    const dash = series[i]!.dash ? ` stroke-dasharray="${escapeXml(series[i]!.dash!)}"` : "";
    out.push(
      `<line x1="${x}" y1="14" x2="${x + 14}" y2="14" stroke="${color}" stroke-width="2"${dash}/>`,
      `<text x="${x + 18}" y="18">${escapeXml(name)}</text>`,
    );
  }
  return `<g class="legend">\n${out.join("\n")}\n</g>`;
}

/**
 * Stacks `<svg>` plots vertically into one standalone SVG document; each
 * plot keeps its own width and height attributes.
 */
export function stackPlots(plots: readonly string[]): string {
  let y = 0;
  let width = 0;
  const placed = plots.map((svg) => {
    const w = Number(/ width="([\d.]+)"/.exec(svg)?.[1] ?? 0);
    const h = Number(/ height="([\d.]+)"/.exec(svg)?.[1] ?? 0);
    const at = svg.replace("<svg ", `<svg x="0" y="${y}" `);
    y += h;
    width = Math.max(width, w);
    return at;
  });
  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y}" viewBox="0 0 ${width} ${y}">`,
    ...placed,
    "</svg>",
    "",
  ].join("\n");
}
