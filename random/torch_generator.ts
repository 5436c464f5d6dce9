/**
 * A random generator that reproduces torch 1.13's CPU generator bit for bit:
 * MT19937 seeded like `torch.Generator().manual_seed(s)`, and the draws that
 * dtrain needs (randperm, randint, rand, uniform_, normal_) in torch's exact
 * order and arithmetic. Its state is plain JSON so checkpoints can store it.
 */
import { Mt19937 } from "./mt19937.ts";
import { fmaf32 } from "./float32_fma.ts";
import { normalFillBlocks } from "./box_muller_avx2.ts";
import { section } from "../profile/profile.ts";

/** torch's default seed (`default_rng_seed_val`), used by `torch.Generator()`. */
export const TORCH_DEFAULT_SEED = 67280421310721n;

const TWO_POW_32 = 4294967296;
const TWO_POW_MINUS_53 = 2 ** -53;
const MAX_RANDPERM = 2 ** 31 - 1;

/** A JSON-friendly snapshot of a TorchGenerator (see getState / setState). */
export interface TorchGeneratorState {
  /** The seed given to manualSeed, as a decimal string of a uint64. */
  seed: string;
  /** The 624 MT19937 state words. */
  words: number[];
  /** Index of the next state word, in [0, 624]. */
  index: number;
  /** The cached second Box-Muller sample of the double path, or null. */
  nextDoubleNormal: number | null;
}

/** Turns a torch-style seed (any integer in [-2**63, 2**64)) into its uint64 value. */
function toUint64Seed(seed: number | bigint): bigint {
  if (typeof seed === "number" && !Number.isSafeInteger(seed)) {
    throw new RangeError(
      `Cannot seed a TorchGenerator with ${seed}: expected a safe integer (or a bigint)`,
    );
  }
  const big = BigInt(seed);
  if (big < -(2n ** 63n) || big >= 2n ** 64n) {
    throw new RangeError(
      `Cannot seed a TorchGenerator with ${big}: expected an integer in [-2**63, 2**64)`,
    );
  }
  return BigInt.asUintN(64, big);
}

/** Throws unless `lo`..`hi` is a usable pair of float bounds. */
function checkBounds(what: string, lo: number, hi: number): void {
  if (!Number.isFinite(lo) || !Number.isFinite(hi) || lo > hi) {
    throw new RangeError(
      `Cannot draw ${what}: expected finite bounds with lo <= hi, got lo=${lo}, hi=${hi}`,
    );
  }
}

/**
 * torch 1.13's CPU generator. Two instances seeded alike give identical
 * streams, and each method consumes the generator exactly as torch would.
 *
 * @example
 * ```ts
 * const g = new TorchGenerator(42);
 * const perm = g.randperm(10); // == torch.randperm(10, generator=torch.Generator().manual_seed(42))
 * ```
 */
export class TorchGenerator {
  #mt = new Mt19937(0);
  #seed = 0n;
  #nextDoubleNormal: number | null = null;

  /** Creates a generator seeded with `seed` (torch's default seed when omitted). */
  constructor(seed: number | bigint = TORCH_DEFAULT_SEED) {
    this.manualSeed(seed);
  }

  /** Re-seeds like `manual_seed`: MT19937 init_genrand on the low 32 bits; returns this. */
  manualSeed(seed: number | bigint): this {
    this.#seed = toUint64Seed(seed);
    this.#mt.seed(Number(this.#seed & 0xffffffffn));
    this.#nextDoubleNormal = null;
    return this;
  }

  /** The seed last given to manualSeed, as a uint64 (torch's `initial_seed()`). */
  initialSeed(): bigint {
    return this.#seed;
  }

  /**
   * The next raw 32-bit output of MT19937, an integer in [0, 2**32) (torch's
   * `generator->random()`). For a float in [0, 1) use randFloat32 or uniform_.
   */
  nextUint32(): number {
    return this.#mt.nextU32();
  }

  /** Two raw outputs joined as a uint64, the first one in the high half (torch's `random64()`). */
  nextUint64(): bigint {
    const hi = this.#mt.nextU32();
    const lo = this.#mt.nextU32();
    return (BigInt(hi) << 32n) | BigInt(lo);
  }

  /**
   * One integer uniform in [lo, hi), as `torch.randint(lo, hi, ...)` draws
   * each element: `nextUint32() % (hi - lo) + lo`, or `nextUint64()` when the range
   * is 2**32 or more.
   */
  randint(lo: number, hi: number): number {
    if (!Number.isSafeInteger(lo) || !Number.isSafeInteger(hi) || hi <= lo) {
      throw new RangeError(
        `Cannot draw randint(${lo}, ${hi}): expected safe integers with lo < hi`,
      );
    }
    const range = hi - lo;
    if (!Number.isSafeInteger(range)) {
      throw new RangeError(
        `Cannot draw randint(${lo}, ${hi}): the range ${range} exceeds 2**53 - 1`,
      );
    }
    if (range < TWO_POW_32) return (this.#mt.nextU32() % range) + lo;
    return Number(this.nextUint64() % BigInt(range)) + lo;
  }

  /**
   * A random permutation of 0..n-1, as torch 1.13's CPU `randperm`:
   * for i in 0..n-2, swap r[i] with r[i + nextUint32() % (n - i)].
   */
  randperm(n: number): Int32Array<ArrayBuffer> {
    if (!Number.isInteger(n) || n < 0 || n > MAX_RANDPERM) {
      throw new RangeError(
        `Cannot draw randperm(${n}): expected an integer n in [0, ${MAX_RANDPERM}]`,
      );
    }
    const r = new Int32Array(n);
    this.#mt.fillPermutation(r);
    return r;
  }

  /** `torch.rand(n)`: n float32 uniforms in [0, 1), each `(u & 0xFFFFFF) * 2**-24`. */
  randFloat32(n: number): Float32Array<ArrayBuffer> {
    if (!Number.isInteger(n) || n < 0) {
      throw new RangeError(
        `Cannot draw randFloat32(${n}): expected a non-negative integer`,
      );
    }
    const out = new Float32Array(n);
    this.#mt.fillUnit(out, 0, n);
    return out;
  }

  /**
   * Fills `out` like `tensor.uniform_(lo, hi)` on a float32 tensor: with
   * float32 bounds and `x = (u & 0xFFFFFF) * 2**-24`, each element is
   * `fma(x, hi - lo, lo)` rounded once. Returns `out`.
   */
  uniform_<T extends Float32Array>(out: T, lo: number, hi: number): T {
    return section("data generation", () => this.#uniform(out, lo, hi));
  }

  #uniform<T extends Float32Array>(out: T, lo: number, hi: number): T {
    checkBounds("uniform_", lo, hi);
    const from = Math.fround(lo);
    const span = Math.fround(Math.fround(hi) - from);
    this.#mt.fillUniform(out, from, span, fmaf32);
    return out;
  }

  /**
   * Fills `out` like `tensor.normal_(mean, std)` on a contiguous float32
   * tensor in torch 1.13 built for AVX2. With 16 or more elements: fill with
   * uniforms, Box-Muller in blocks of 16, and when the length is not a multiple
   * of 16, draw 16 fresh uniforms for the last 16 elements and transform them
   * again (this path is bit-exact). With fewer than 16: torch's double
   * Box-Muller with a cached second sample, whose libm calls (log, sin, cos)
   * may differ from glibc in the last bit of a double. Returns `out`.
   */
  normal_<T extends Float32Array>(out: T, mean: number, std: number): T {
    return section("data generation", () => this.#normal(out, mean, std));
  }

  #normal<T extends Float32Array>(out: T, mean: number, std: number): T {
    if (!Number.isFinite(mean) || !Number.isFinite(std) || std < 0) {
      throw new RangeError(
        `Cannot draw normal_(mean=${mean}, std=${std}): expected finite values with std >= 0`,
      );
    }
    const size = out.length;
    if (size < 16) {
      for (let i = 0; i < size; i++) out[i] = this.#normalDouble() * std + mean;
      return out;
    }
    const meanF = Math.fround(mean);
    const stdF = Math.fround(std);
    this.#mt.fillUnit(out, 0, size);
    normalFillBlocks(out, 0, Math.floor(size / 16), meanF, stdF);
    if (size % 16 !== 0) {
      this.#mt.fillUnit(out, size - 16, size);
      normalFillBlocks(out, size - 16, 1, meanF, stdF);
    }
    return out;
  }

  /** A JSON-friendly copy of the full state; setState() of it continues the identical stream. */
  getState(): TorchGeneratorState {
    const { words, index } = this.#mt.getState();
    return {
      seed: this.#seed.toString(),
      words,
      index,
      nextDoubleNormal: this.#nextDoubleNormal,
    };
  }

  /** Restores a state from getState() (e.g. read back from a checkpoint's JSON). */
  setState(state: TorchGeneratorState): void {
    if (typeof state !== "object" || state === null) {
      throw new TypeError(
        `Cannot restore TorchGenerator state: expected an object, got ${state}`,
      );
    }
    if (typeof state.seed !== "string" || !/^[0-9]+$/.test(state.seed)) {
      throw new RangeError(
        `Cannot restore TorchGenerator state: seed ${state.seed} is not a decimal uint64 string`,
      );
    }
    const cached = state.nextDoubleNormal;
    if (cached !== null && !Number.isFinite(cached)) {
      throw new RangeError(
        `Cannot restore TorchGenerator state: nextDoubleNormal ${cached} is not a finite number or null`,
      );
    }
    const seed = toUint64Seed(BigInt(state.seed));
    this.#mt.setState({ words: state.words, index: state.index });
    this.#seed = seed;
    this.#nextDoubleNormal = cached;
  }

  /** torch's `normal_distribution<double>` draw of N(0, 1), with its one-sample cache. */
  #normalDouble(): number {
    if (this.#nextDoubleNormal !== null) {
      const cached = this.#nextDoubleNormal;
      this.#nextDoubleNormal = null;
      return cached;
    }
    const u1 = Number(this.nextUint64() & 0x1fffffffffffffn) * TWO_POW_MINUS_53;
    const u2 = Number(this.nextUint64() & 0x1fffffffffffffn) * TWO_POW_MINUS_53;
    const r = Math.sqrt(-2 * Math.log(1 - u2));
    const theta = 2 * Math.PI * u1;
    this.#nextDoubleNormal = r * Math.sin(theta);
    return r * Math.cos(theta);
  }
}
