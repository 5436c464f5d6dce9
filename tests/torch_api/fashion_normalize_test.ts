/**
 * loadFashionMnist's normalisation chosen by the caller: on a small
 * synthetic IDX set holding every byte value, the default (the training
 * set's mean 0.286 and std 0.353), normalize: null (pixels / 255) and other
 * mean/std pairs give, bit for bit, torchvision's ToTensor then Normalize as
 * torch computes them (fixtures/torch_api/pixels.json); bad values are refused.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadFashionMnist, type PixelNormalization } from "../../data/fashion_mnist.ts";
import { readPiecesFixture } from "./_fixtures.ts";

const FIX = readPiecesFixture<
  { cases: { normalize: PixelNormalization | null; values: number[] }[] }
>("pixels.json");

/** An IDX file of unsigned bytes (magic 0x08, big-endian dims). */
function writeIdx(path: string, dims: number[], data: Uint8Array): void {
  const head = new Uint8Array(4 + 4 * dims.length);
  const view = new DataView(head.buffer);
  view.setUint8(2, 0x08);
  view.setUint8(3, dims.length);
  dims.forEach((d, i) => view.setUint32(4 + 4 * i, d, false));
  const out = new Uint8Array(head.length + data.length);
  out.set(head);
  out.set(data, head.length);
  Deno.writeFileSync(path, out);
}

/** A folder with both splits: images whose pixels run through 0..255 (4 images of 784). */
function tinySet(): { dir: string; pixels: Uint8Array } {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-fashion-" });
  const pixels = Uint8Array.from({ length: 4 * 784 }, (_, i) => (i * 7) % 256);
  for (
    const [images, labels] of [["train-images-idx3-ubyte", "train-labels-idx1-ubyte"], [
      "t10k-images-idx3-ubyte",
      "t10k-labels-idx1-ubyte",
    ]]
  ) {
    writeIdx(join(dir, images!), [4, 28, 28], pixels);
    writeIdx(join(dir, labels!), [4], Uint8Array.from([1, 2, 3, 4]));
  }
  return { dir, pixels };
}

Deno.test("loadFashionMnist's normalisation (default, none, chosen) equals torchvision's ToTensor + Normalize", async () => {
  const { dir, pixels } = tinySet();
  try {
    for (const c of FIX.cases) {
      const isDefault = c.normalize?.mean === 0.286 && c.normalize?.std === 0.353;
      const { train } = await loadFashionMnist(dir, {
        cacheDir: join(dir, "cache"),
        ...(isDefault ? {} : { normalize: c.normalize }),
      });
      const [x] = train.getBatch(Int32Array.from([0, 1, 2, 3]));
      const got = x!.toArray() as Float32Array;
      const want = Float32Array.from(pixels, (b) => c.values[b]!);
      assert.deepEqual(
        got,
        want,
        `normalize ${JSON.stringify(c.normalize)}${isDefault ? " (the default)" : ""}`,
      );
    }
    await assert.rejects(
      () => loadFashionMnist(dir, { normalize: { mean: 0.5, std: 0 } }),
      /positive std/,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
