/**
 * Fashion-MNIST as two datasets (train 60000, test 10000): images f32
 * [784] scaled to [0,1] then normalised (by default with the training set's
 * mean and std; the caller may pick others or none),
 * labels i32 in 0..9. Read from the IDX files of Debian's dataset-fashion-mnist,
 * decompressed once into dtrain's cache folder (later loads read the copy).
 */
import { join } from "node:path";
import { cacheFolder } from "../os/cache_folder.ts";
import { Progress } from "../distributed/control/progress.ts";
import { ByteImageDataset } from "./byte_images.ts";
import { type IdxArray, readIdxCached } from "./idx.ts";

/** Where Debian's package `dataset-fashion-mnist` installs the files. */
export const FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist";

/**
 * Mean and std of the 60000 training images' pixels scaled to [0,1]
 * (0.28604 and 0.35302 measured; the rounded values are the customary ones,
 * and scripts/peers/fashion_mnist.py uses the same).
 */
export const FASHION_MNIST_MEAN = 0.286;
/** See FASHION_MNIST_MEAN. */
export const FASHION_MNIST_STD = 0.353;

/** Pixels per image (28 x 28), the length of one image sample. */
export const FASHION_MNIST_PIXELS = 784;
/** Number of classes; labels are 0..9. */
export const FASHION_MNIST_CLASSES = 10;

/** The two splits; each sample is [image f32 [784], label i32 []]. */
export interface FashionMnist {
  /** The 60,000 training images. */
  train: ByteImageDataset;
  /** The 10,000 test images. */
  test: ByteImageDataset;
}

const SPLIT_FILES = {
  train: { images: "train-images-idx3-ubyte", labels: "train-labels-idx1-ubyte" },
  test: { images: "t10k-images-idx3-ubyte", labels: "t10k-labels-idx1-ubyte" },
} as const;

/** How pixels are normalised after scaling to [0, 1]: torchvision's Normalize((mean,), (std,)). */
export interface PixelNormalization {
  /** subtracted after scaling to [0, 1] */
  mean: number;
  /** divides after the subtraction */
  std: number;
}

/**
 * The f32 value of each byte value, computed in f32 exactly as torchvision's
 * ToTensor then Normalize (`(x.float() / 255 - mean) / std` with float32
 * constants), or ToTensor alone when `norm` is null; each JS operation on
 * float32 inputs, rounded once by Math.fround, equals the f32 op.
 */
function pixelTable(norm: PixelNormalization | null): Float32Array<ArrayBuffer> {
  const f = Math.fround;
  if (norm === null) return Float32Array.from({ length: 256 }, (_, b) => f(b / 255));
  const mean = f(norm.mean), std = f(norm.std);
  return Float32Array.from({ length: 256 }, (_, b) => f(f(f(b / 255) - mean) / std));
}

/** The path of `base` in `dir`, uncompressed if present, else `base.gz`; null if neither. */
function findFile(dir: string, base: string): string | null {
  for (const name of [base, `${base}.gz`]) {
    try {
      if (Deno.statSync(join(dir, name)).isFile) return join(dir, name);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
  }
  return null;
}

function checkDims(file: string, got: IdxArray, expected: string, ok: boolean): void {
  if (!ok) {
    throw new Error(`Fashion-MNIST file ${file} has dims [${got.dims}]: expected ${expected}`);
  }
}

/** Where the split loads report their progress, and where decompressed copies are kept. */
interface LoadContext {
  cacheDir: string;
  progress: Progress;
  /** bytes decompressed by earlier files */
  base: number;
}

async function loadSplit(
  dir: string,
  files: { images: string; labels: string },
  ctx: LoadContext,
  pixels: Float32Array<ArrayBuffer>,
): Promise<ByteImageDataset> {
  const paths = [files.images, files.labels].map((base) => findFile(dir, base));
  const missing = [files.images, files.labels].filter((_, i) => paths[i] === null);
  if (missing.length > 0) {
    throw new Error(
      `Fashion-MNIST not found in ${dir}: missing ${
        missing.map((m) => `${m}[.gz]`).join(", ")
      }. Install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist), ` +
        `or point DTRAIN_FASHION_MNIST (or the dir argument) at a folder holding the four IDX files`,
    );
  }
  const [imagePath, labelPath] = paths as [string, string];
  const read = async (path: string) => {
    const base = ctx.base;
    const r = await readIdxCached(path, ctx.cacheDir, {
      onProgress: (n) => ctx.progress.update(base + n, "decompressed"),
    });
    ctx.base += r.data.length;
    return r;
  };
  const images = await read(imagePath);
  const labels = await read(labelPath);
  const [count, rows, cols] = images.dims;
  checkDims(
    imagePath,
    images,
    "[N, 28, 28]",
    images.dims.length === 3 && rows === 28 && cols === 28,
  );
  checkDims(
    labelPath,
    labels,
    `[${count}] (one label per image)`,
    labels.dims.length === 1 && labels.dims[0] === count,
  );

  const labelData = new Int32Array(labels.data.length);
  labelData.set(labels.data);
  const bad = labels.data.findIndex((l) => l >= FASHION_MNIST_CLASSES);
  if (bad >= 0) {
    throw new Error(
      `Fashion-MNIST file ${labelPath}: label ${labels.data[bad]} at index ${bad} is outside 0..${
        FASHION_MNIST_CLASSES - 1
      }`,
    );
  }
  // Kept as bytes and normalised a batch at a time (exactly as a pre-converted f32 copy would be).
  return new ByteImageDataset(images.data, [FASHION_MNIST_PIXELS], labelData, pixels);
}

/** Options of loadFashionMnist. */
export interface FashionMnistOptions {
  /** where decompressed copies are kept (default `<dtrain cache>/datasets`) */
  cacheDir?: string;
  /**
   * The normalisation after scaling pixels to [0, 1] (torchvision's
   * Normalize): default the training set's { mean: 0.286, std: 0.353 }; null
   * keeps [0, 1] (ToTensor alone).
   */
  normalize?: PixelNormalization | null;
}

/**
 * Loads both splits of Fashion-MNIST from `dir` (default: $DTRAIN_FASHION_MNIST,
 * else /usr/share/datasets/fashion-mnist). Each file may be plain or `.gz`;
 * a `.gz` file is decompressed once into `<dtrain cache>/datasets` (see
 * os/cache_folder.ts) and read from there later. A pixel p in 0..255 becomes
 * `(p / 255 - mean) / std` in f32, by default with the training set's mean
 * 0.2860 and std 0.3530 (`normalize` picks others, or null for p / 255). A
 * load that takes more than 2 s prints its progress on rank 0.
 *
 * @example
 * ```ts
 * const { train, test } = await loadFashionMnist();
 * const [x, y] = train.getBatch(new Int32Array([0, 1])); // x f32 [2, 784], y i32 [2]
 * const raw = await loadFashionMnist(undefined, { normalize: null }); // pixels in [0, 1]
 * const mnistStyle = await loadFashionMnist(undefined, { normalize: { mean: 0.5, std: 0.5 } }); // [-1, 1]
 * ```
 */
export async function loadFashionMnist(
  dir?: string,
  opts: FashionMnistOptions = {},
): Promise<FashionMnist> {
  const norm = opts.normalize === undefined
    ? { mean: FASHION_MNIST_MEAN, std: FASHION_MNIST_STD }
    : opts.normalize;
  if (norm !== null) {
    if (!Number.isFinite(norm.mean) || !Number.isFinite(norm.std) || norm.std <= 0) {
      throw new RangeError(
        `loadFashionMnist: normalize needs a finite mean and a positive std, got ${
          JSON.stringify(norm)
        }`,
      );
    }
  }
  const pixels = pixelTable(norm);
  const folder = dir ?? Deno.env.get("DTRAIN_FASHION_MNIST") ?? FASHION_MNIST_DIR;
  const ctx: LoadContext = {
    cacheDir: opts.cacheDir ?? join(cacheFolder(), "datasets"),
    progress: new Progress("loading Fashion-MNIST", { unit: "bytes" }),
    base: 0,
  };
  const train = await loadSplit(folder, SPLIT_FILES.train, ctx, pixels);
  const test = await loadSplit(folder, SPLIT_FILES.test, ctx, pixels);
  ctx.progress.done(`${train.length} training and ${test.length} test images`);
  return { train, test };
}
