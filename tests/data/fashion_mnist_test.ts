/**
 * loadFashionMnist(): on small synthetic IDX files (always run) the pixel
 * formula, label widening, env override and every error; on the real Debian
 * files (skipped without dataset-fashion-mnist) the split sizes and class
 * counts, and byte equality with the PyTorch peer's numpy loader (skipped
 * without numpy in /usr/bin/python3).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildNative } from "../../scripts/build_native.ts";
import {
  FASHION_MNIST_DIR,
  FASHION_MNIST_MEAN,
  FASHION_MNIST_STD,
  type FashionMnist,
  loadFashionMnist,
} from "../../data/fashion_mnist.ts";
import type { Dataset } from "../../data/dataset.ts";
import { scope } from "../../tensor/tensor.ts";

buildNative({ quiet: true });

const PYTHON = "/usr/bin/python3";
const PEERS = fileURLToPath(new URL("../../scripts/peers/", import.meta.url));
const REAL_DIR = Deno.env.get("DTRAIN_FASHION_MNIST") ?? FASHION_MNIST_DIR;

const hasRealData = ["train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"].every((base) =>
  [base, `${base}.gz`].some((n) => {
    try {
      return Deno.statSync(join(REAL_DIR, n)).isFile;
    } catch {
      return false;
    }
  })
);

/** Whether PYTHON exists and finds numpy (a spec lookup, no import). */
function hasNumpy(): boolean {
  try {
    const probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('numpy') is None)";
    return new Deno.Command(PYTHON, { args: ["-c", probe], stdout: "null", stderr: "null" })
      .outputSync().success;
  } catch {
    return false;
  }
}

if (!hasRealData) {
  console.warn(
    `fashion_mnist_test: real-data tests skipped: no Fashion-MNIST in ${REAL_DIR} ` +
      `(apt-get install dataset-fashion-mnist)`,
  );
}
const numpyReady = hasRealData && hasNumpy();
if (hasRealData && !numpyReady) {
  console.warn(`fashion_mnist_test: numpy comparison skipped: ${PYTHON} lacks numpy`);
}

/** Writes a u8 IDX file (gzip-compressed when the name ends in .gz). */
async function writeIdx(path: string, dims: number[], data: Uint8Array): Promise<void> {
  const bytes = new Uint8Array(4 + 4 * dims.length + data.length);
  bytes.set([0, 0, 0x08, dims.length]);
  dims.forEach((d, i) => new DataView(bytes.buffer).setUint32(4 + 4 * i, d, false));
  bytes.set(data, 4 + 4 * dims.length);
  if (!path.endsWith(".gz")) return Deno.writeFile(path, bytes);
  const packed = new Blob([bytes]).stream().pipeThrough(new CompressionStream("gzip"));
  await Deno.writeFile(path, new Uint8Array(await new Response(packed).arrayBuffer()));
}

/** A temp folder with a tiny Fashion-MNIST: train of 3 images, test of 2; mixes plain and .gz. */
async function tinyDataset(labels = [9, 0, 4]): Promise<{ dir: string; pixels: Uint8Array }> {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-fmnist-" });
  const pixels = Uint8Array.from({ length: 3 * 784 }, (_, i) => (i * 7 + (i >> 8)) % 256);
  await writeIdx(join(dir, "train-images-idx3-ubyte.gz"), [3, 28, 28], pixels);
  await writeIdx(join(dir, "train-labels-idx1-ubyte"), [3], Uint8Array.from(labels));
  await writeIdx(join(dir, "t10k-images-idx3-ubyte"), [2, 28, 28], pixels.subarray(0, 2 * 784));
  await writeIdx(join(dir, "t10k-labels-idx1-ubyte.gz"), [2], Uint8Array.from([1, 2]));
  return { dir, pixels };
}

/** Samples `indices` of a dataset as plain arrays: [images, labels]. */
function samples(ds: Dataset, indices: number[]): [Float32Array, Int32Array] {
  return scope(() => {
    const [x, y] = ds.getBatch(Int32Array.from(indices));
    return [x!.toArray() as Float32Array, y!.toArray() as Int32Array];
  });
}

Deno.test("loadFashionMnist() maps pixel p to f32 (p/255 - 0.2860)/0.3530 and widens labels to i32", async () => {
  const { dir, pixels } = await tinyDataset();
  try {
    const { train, test } = await loadFashionMnist(dir, { cacheDir: join(dir, "cache") });
    assert.equal(train.length, 3);
    assert.equal(test.length, 2);
    const [images, labels] = samples(train, [2, 0]);
    assert.deepEqual([...labels], [4, 9]);
    const f = Math.fround;
    const expected = (p: number) => f(f(f(p / 255) - f(FASHION_MNIST_MEAN)) / f(FASHION_MNIST_STD));
    for (const [row, sample] of [[0, 2], [1, 0]] as const) {
      for (let i = 0; i < 784; i++) {
        const p = pixels[sample * 784 + i]!;
        assert.equal(images[row * 784 + i], expected(p), `sample ${sample} pixel ${i} (byte ${p})`);
      }
    }
    // Anchors independent of the formula above: black and white pixels.
    assert.ok(
      Math.abs(expected(0) - -0.810198) < 1e-6 && Math.abs(expected(255) - 2.022663) < 1e-6,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("loadFashionMnist() decompresses a .gz file once and later reads the cached copy", async () => {
  const { dir, pixels } = await tinyDataset();
  const cacheDir = join(dir, "cache");
  try {
    const first = await loadFashionMnist(dir, { cacheDir });
    const kept = [...Deno.readDirSync(cacheDir)].map((e) => e.name).sort();
    assert.equal(kept.length, 2, "the two .gz files");
    assert.match(kept[0]!, /^t10k-labels-idx1-ubyte-[0-9a-f]{16}\.idx$/);
    // The copy is what is read now: a changed copy shows (the source is untouched).
    const copy = join(cacheDir, kept[1]!);
    const bytes = Deno.readFileSync(copy);
    bytes[16] = pixels[0]! ^ 0xff;
    Deno.writeFileSync(copy, bytes);
    const second = await loadFashionMnist(dir, { cacheDir });
    assert.notDeepEqual(samples(second.train, [0])[0][0], samples(first.train, [0])[0][0]);
    assert.deepEqual(samples(second.train, [1, 2]), samples(first.train, [1, 2]));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("loadFashionMnist() reads the folder named by DTRAIN_FASHION_MNIST when given no argument", async () => {
  const { dir } = await tinyDataset();
  const before = Deno.env.get("DTRAIN_FASHION_MNIST");
  try {
    Deno.env.set("DTRAIN_FASHION_MNIST", dir);
    assert.equal(
      (await loadFashionMnist(undefined, { cacheDir: join(dir, "cache") })).train.length,
      3,
    );
  } finally {
    before === undefined
      ? Deno.env.delete("DTRAIN_FASHION_MNIST")
      : Deno.env.set("DTRAIN_FASHION_MNIST", before);
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("loadFashionMnist() names the missing files and the Debian package to install", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-fmnist-empty-" });
  try {
    await assert.rejects(() => loadFashionMnist(dir), (e: Error) => {
      assert.match(e.message, new RegExp(`Fashion-MNIST not found in ${dir}`));
      assert.match(e.message, /missing train-images-idx3-ubyte\[\.gz\], train-labels-idx1-ubyte/);
      assert.match(e.message, /apt-get install dataset-fashion-mnist/);
      return true;
    });
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("loadFashionMnist() refuses labels outside 0..9 and label counts that differ from the images", async () => {
  const bad = await tinyDataset([3, 10, 1]);
  try {
    await assert.rejects(
      () => loadFashionMnist(bad.dir),
      /label 10 at index 1 is outside 0\.\.9/,
    );
    await writeIdx(join(bad.dir, "train-labels-idx1-ubyte"), [2], Uint8Array.from([1, 2]));
    await assert.rejects(
      () => loadFashionMnist(bad.dir),
      /train-labels-idx1-ubyte has dims \[2\]: expected \[3\] \(one label per image\)/,
    );
    await writeIdx(join(bad.dir, "train-images-idx3-ubyte.gz"), [3, 784], new Uint8Array(3 * 784));
    await assert.rejects(
      () => loadFashionMnist(bad.dir),
      /train-images-idx3-ubyte\.gz has dims \[3,784\]: expected \[N, 28, 28\]/,
    );
  } finally {
    Deno.removeSync(bad.dir, { recursive: true });
  }
});

let realData: Promise<FashionMnist> | undefined;
/** The real dataset, loaded once for the tests that need it (~1 s of work). */
function real(): Promise<FashionMnist> {
  realData ??= loadFashionMnist(REAL_DIR);
  return realData;
}

/** The first `count` samples of a split, in order. */
function head(ds: Dataset, count: number): [Float32Array, Int32Array] {
  return samples(ds, Array.from({ length: count }, (_, i) => i));
}

Deno.test({
  name:
    "loadFashionMnist() gives 60000 + 10000 samples of f32 [784] and i32 labels, 1000 test images per class",
  ignore: !hasRealData,
  async fn() {
    const { train, test } = await real();
    assert.equal(train.length, 60000);
    assert.equal(test.length, 10000);
    scope(() => {
      const [x, y] = test.getBatch(new Int32Array([0, 9999]));
      assert.deepEqual([x!.shape, x!.dtype, y!.shape, y!.dtype], [[2, 784], "f32", [2], "i32"]);
      const pixels = x!.toArray() as Float32Array;
      const lo = Math.fround(-0.286 / 0.353), hi = Math.fround((1 - 0.286) / 0.353);
      assert.ok(pixels.every((v) => v >= lo - 1e-6 && v <= hi + 1e-6));
    });
    const counts = new Array(10).fill(0);
    for (const label of head(test, 10000)[1]) counts[label]++;
    assert.deepEqual(counts, new Array(10).fill(1000));
  },
});

/** sha256 of the first 10000 samples' normalised images and of their labels as int64. */
function headDigests(ds: Dataset): { images: string; labels: string } {
  const [x, y] = head(ds, 10000);
  const images = new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  const labels = new Uint8Array(BigInt64Array.from(y, BigInt).buffer);
  return {
    images: createHash("sha256").update(images).digest("hex"),
    labels: createHash("sha256").update(labels).digest("hex"),
  };
}

Deno.test({
  name:
    "loadFashionMnist() yields exactly the bytes of the PyTorch peer's numpy loader (first 10000 of each split)",
  ignore: !numpyReady,
  async fn() {
    const program = `
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
from fashion_mnist import load_split
out = {}
for split in ("train", "test"):
    x, y = load_split(sys.argv[2], split)
    out[split] = {"images": hashlib.sha256(x[:10000].tobytes()).hexdigest(),
                  "labels": hashlib.sha256(y[:10000].tobytes()).hexdigest(),
                  "first": x[0, 200:208].tolist()}
print(json.dumps(out))
`;
    const run = new Deno.Command(PYTHON, {
      args: ["-c", program, PEERS, REAL_DIR],
      env: { PYTHONDONTWRITEBYTECODE: "1" }, // leave no __pycache__ in scripts/peers
    }).output();
    const { train, test } = await real();
    const mine = { train: headDigests(train), test: headDigests(test) };
    const result = await run;
    assert.ok(result.success, new TextDecoder().decode(result.stderr));
    const peer = JSON.parse(new TextDecoder().decode(result.stdout));
    const [first] = samples(train, [0]);
    assert.deepEqual([...first.subarray(200, 208)], peer.train.first); // readable if the digests differ
    assert.deepEqual(mine.train, { images: peer.train.images, labels: peer.train.labels });
    assert.deepEqual(mine.test, { images: peer.test.images, labels: peer.test.labels });
  },
});
