/**
 * The comparison page's only script: its smoothing control redraws every
 * smoothed line from the raw points embedded in the page, with the very
 * functions that drew them (their source text), so page and server agree.
 */
import { smoothEma } from "./smoothing.ts";
import { pixelOf, segments } from "./svg_plot.ts";

/** The id of the `<script type="application/json">` that holds the raw series of each smoothed plot. */
export const DATA_ID = "plot-data";
/** The ids of the smoothing slider and of the element that shows its value. */
export const SLIDER_ID = "smoothing";
export const SLIDER_VALUE_ID = "smoothing-value";

/** JSON for inside a `<script>` element: no `</script>` or `<!--` can end or change it. */
export function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(
    /\u2029/g,
    "\\u2029",
  );
}

/**
 * The script's text. For each `svg[data-smoothed]` it replaces the
 * `data-role="smooth"` lines by new ones smoothed with the slider's weight,
 * placed with the plot's data-scale.
 */
export function pageScript(): string {
  return `(() => {
"use strict";
const smoothEma = ${smoothEma.toString()};
const pixelOf = ${pixelOf.toString()};
const segments = ${segments.toString()};
const NS = "http://www.w3.org/2000/svg";
const data = JSON.parse(document.getElementById(${JSON.stringify(DATA_ID)}).textContent);
const slider = document.getElementById(${JSON.stringify(SLIDER_ID)});
const shown = document.getElementById(${JSON.stringify(SLIDER_VALUE_ID)});
function redraw(weight) {
  for (const svg of document.querySelectorAll("svg[data-smoothed]")) {
    const scale = JSON.parse(svg.getAttribute("data-scale"));
    for (const old of svg.querySelectorAll('[data-role="smooth"]')) old.remove();
    const before = svg.querySelector("g.legend");
    for (const s of data[svg.getAttribute("data-plot")] || []) {
      const ys = smoothEma(s.points.map((p) => p[1] === null ? NaN : p[1]), weight);
      const pts = s.points.map((p, i) => [p[0], ys[i]]);
      for (const seg of segments(pts, scale.logY)) {
        const one = seg.length === 1;
        const el = document.createElementNS(NS, one ? "circle" : "polyline");
        el.setAttribute("data-series", s.name);
        el.setAttribute("data-role", "smooth");
        if (one) {
          const [cx, cy] = pixelOf(scale, seg[0][0], seg[0][1]);
          el.setAttribute("cx", cx);
          el.setAttribute("cy", cy);
          el.setAttribute("r", "2");
          el.setAttribute("fill", s.color);
        } else {
          el.setAttribute("fill", "none");
          el.setAttribute("stroke", s.color);
          el.setAttribute("stroke-width", "1.5");
          if (s.dash) el.setAttribute("stroke-dasharray", s.dash);
          el.setAttribute("points", seg.map((p) => pixelOf(scale, p[0], p[1]).join(",")).join(" "));
        }
        svg.insertBefore(el, before);
      }
    }
  }
}
slider.addEventListener("input", () => {
  const weight = Number(slider.value);
  shown.textContent = weight.toFixed(2);
  redraw(weight);
});
})();`;
}
