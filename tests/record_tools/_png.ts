/**
 * A minimal PNG decoder for tests: 8-bit RGB or RGBA, not interlaced (what
 * Chromium's --screenshot writes), via node:zlib and the five row filters.
 */
import { inflateSync } from "node:zlib";

/** Decoded pixels, 4 bytes (RGBA) each, row by row. */
export interface Image {
  width: number;
  height: number;
  rgba: Uint8Array;
}

const SIGNATURE = [137, 80, 78, 71, 13, 10, 26, 10];

function paeth(a: number, b: number, c: number): number {
  const p = a + b - c;
  const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/** Decodes a PNG file's bytes; throws a TypeError naming what is unsupported. */
export function decodePng(bytes: Uint8Array): Image {
  if (!SIGNATURE.every((b, i) => bytes[i] === b)) {
    throw new TypeError("not a PNG file: bad signature");
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let width = 0, height = 0, colorType = 0;
  const idat: Uint8Array[] = [];
  for (let at = 8; at + 8 <= bytes.length;) {
    const length = view.getUint32(at);
    const type = String.fromCharCode(...bytes.subarray(at + 4, at + 8));
    const data = bytes.subarray(at + 8, at + 8 + length);
    if (type === "IHDR") {
      width = view.getUint32(at + 8);
      height = view.getUint32(at + 12);
      const depth = data[8], interlace = data[12];
      colorType = data[9]!;
      if (depth !== 8 || (colorType !== 2 && colorType !== 6) || interlace !== 0) {
        throw new TypeError(
          `unsupported PNG: bit depth ${depth}, colour type ${colorType}, interlace ${interlace}`,
        );
      }
    } else if (type === "IDAT") idat.push(data);
    else if (type === "IEND") break;
    at += 12 + length;
  }
  const compressed = new Uint8Array(idat.reduce((n, d) => n + d.length, 0));
  let offset = 0;
  for (const d of idat) {
    compressed.set(d, offset);
    offset += d.length;
  }
  const raw = inflateSync(compressed);
  const channels = colorType === 6 ? 4 : 3;
  const stride = width * channels;
  const pixels = new Uint8Array(height * stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    const row = pixels.subarray(y * stride, (y + 1) * stride);
    const up = y > 0 ? pixels.subarray((y - 1) * stride, y * stride) : new Uint8Array(stride);
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? row[i - channels]! : 0,
        b = up[i]!,
        c = i >= channels ? up[i - channels]! : 0;
      const predictor = filter === 0
        ? 0
        : filter === 1
        ? a
        : filter === 2
        ? b
        : filter === 3
        ? (a + b) >> 1
        : filter === 4
        ? paeth(a, b, c)
        : -1;
      if (predictor < 0) throw new TypeError(`bad PNG row filter ${filter} in row ${y}`);
      row[i] = (src[i]! + predictor) & 255;
    }
  }
  if (channels === 4) return { width, height, rgba: pixels };
  const rgba = new Uint8Array(width * height * 4);
  for (let p = 0; p < width * height; p++) {
    rgba.set([pixels[3 * p]!, pixels[3 * p + 1]!, pixels[3 * p + 2]!, 255], 4 * p);
  }
  return { width, height, rgba };
}

/**
 * How many pixels satisfy `test(r, g, b)`, in the whole image or in `box`
 * = [left, top, width, height] (CSS pixels at device pixel ratio 1).
 */
export function countPixels(
  img: Image,
  test: (r: number, g: number, b: number) => boolean,
  box: readonly number[] = [0, 0, img.width, img.height],
): number {
  const [x0, y0, w, h] = box.map(Math.round) as [number, number, number, number];
  let n = 0;
  for (let y = Math.max(0, y0); y < Math.min(img.height, y0 + h); y++) {
    for (let x = Math.max(0, x0); x < Math.min(img.width, x0 + w); x++) {
      const p = 4 * (y * img.width + x);
      if (test(img.rgba[p]!, img.rgba[p + 1]!, img.rgba[p + 2]!)) n++;
    }
  }
  return n;
}
