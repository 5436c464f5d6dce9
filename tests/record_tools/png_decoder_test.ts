/**
 * Tests of the test helper tests/record_tools/_png.ts, on which the Chromium render
 * check relies: every row filter, RGB and RGBA, and refusals.
 */
import assert from "node:assert/strict";
import { deflateSync } from "node:zlib";
import { countPixels, decodePng } from "./_png.ts";

function chunk(type: string, data: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + data.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, data.length);
  out.set([...type].map((c) => c.charCodeAt(0)), 4);
  out.set(data, 8);
  return out; // the CRC is left 0: the decoder does not check it
}

/** Encodes 8-bit pixels with the given filter for each row (the filters written out from the PNG spec). */
function encodePng(
  width: number,
  pixels: number[][],
  channels: 3 | 4,
  filters: number[],
): Uint8Array {
  const stride = width * channels;
  const rows: number[] = [];
  pixels.forEach((row, y) => {
    const up = y > 0 ? pixels[y - 1]! : new Array(stride).fill(0);
    const f = filters[y]!;
    rows.push(f);
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? row[i - channels]! : 0,
        b = up[i]!,
        c = i >= channels ? up[i - channels]! : 0;
      const p = a + b - c;
      const paeth = Math.abs(p - a) <= Math.abs(p - b) && Math.abs(p - a) <= Math.abs(p - c)
        ? a
        : Math.abs(p - b) <= Math.abs(p - c)
        ? b
        : c;
      const pred = [0, a, b, Math.floor((a + b) / 2), paeth][f]!;
      rows.push((row[i]! - pred + 256) & 255);
    }
  });
  const ihdr = new Uint8Array(13);
  new DataView(ihdr.buffer).setUint32(0, width);
  new DataView(ihdr.buffer).setUint32(4, pixels.length);
  ihdr.set([8, channels === 4 ? 6 : 2, 0, 0, 0], 8);
  const parts = [
    new Uint8Array([137, 80, 78, 71, 13, 10, 26, 10]),
    chunk("IHDR", ihdr),
    chunk("IDAT", deflateSync(new Uint8Array(rows))),
    chunk("IEND", new Uint8Array()),
  ];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

Deno.test("decodePng() undoes each of the five row filters, for RGBA and RGB", () => {
  const rgba = [
    [10, 20, 30, 255, 200, 100, 50, 255, 0, 0, 0, 255],
    [15, 25, 35, 255, 250, 5, 60, 128, 1, 2, 3, 255],
    [255, 255, 255, 255, 7, 9, 11, 255, 90, 80, 70, 255],
    [3, 200, 40, 255, 100, 100, 100, 255, 220, 10, 10, 255],
    [40, 40, 40, 0, 41, 42, 43, 255, 250, 251, 252, 255],
  ];
  const img = decodePng(encodePng(3, rgba, 4, [0, 1, 2, 3, 4]));
  assert.deepEqual([img.width, img.height], [3, 5]);
  assert.deepEqual(Array.from(img.rgba), rgba.flat());
  const rgb = rgba.map((row) => row.filter((_, i) => i % 4 !== 3));
  const img3 = decodePng(encodePng(3, rgb, 3, [4, 3, 2, 1, 0]));
  assert.deepEqual(Array.from(img3.rgba), rgba.flat().map((v, i) => i % 4 === 3 ? 255 : v));
  assert.equal(countPixels(img3, (r, g, b) => r === 255 && g === 255 && b === 255), 1);
});

Deno.test("decodePng() refuses what it cannot decode, by name", () => {
  assert.throws(
    () => decodePng(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8])),
    /not a PNG file: bad signature/,
  );
  const png = encodePng(1, [[1, 2, 3]], 3, [0]);
  png[8 + 8 + 8] = 16; // bit depth byte of IHDR
  assert.throws(() => decodePng(png), /unsupported PNG: bit depth 16/);
  assert.throws(
    () => decodePng(encodePng(1, [[1, 2, 3]], 3, [7])),
    /bad PNG row filter 7 in row 0/,
  );
});
