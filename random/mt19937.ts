/**
 * The MT19937 engine (Matsumoto & Nishimura 1998) exactly as std::mt19937 and
 * torch's CPU generator run it: init_genrand seeding, the 624-word twist and
 * the usual tempering. Only the raw 32-bit stream lives here; distributions
 * built on top of it are in torch_generator.ts. Bulk draws run in native code
 * (kernels/cpu/random.c) when the CPU library is there, with the same bits.
 */
import { cpuRandomCalls } from "../ffi/cpu_random.ts";

/** Number of 32-bit words in the MT19937 state. */
export const MT_STATE_WORDS = 624;
const M = 397;
const MATRIX_A = 0x9908b0df;
const UPPER_MASK = 0x80000000;
const LOWER_MASK = 0x7fffffff;
const TWO_POW_MINUS_24 = 2 ** -24;
/** Below this many draws the JavaScript loop is cheaper than a native call. */
const NATIVE_MIN = 64;

/** A snapshot of an engine: the 624 state words and the next word to read. */
export interface Mt19937State {
  /** The 624 untempered state words, each in [0, 2**32). */
  words: number[];
  /** Index of the next word to temper and return, in [0, 624]; 624 means "twist first". */
  index: number;
}

/**
 * A Mersenne Twister producing the same 32-bit stream as `std::mt19937`.
 *
 * @example
 * ```ts
 * const mt = new Mt19937(0);
 * mt.nextU32(); // 2357136044, the first output of std::mt19937 seeded with 0
 * ```
 */
export class Mt19937 {
  #words = new Uint32Array(MT_STATE_WORDS);
  #index = MT_STATE_WORDS;
  /** #index as the native fills read and advance it */
  readonly #nativeIndex = new Int32Array(1);

  /** Creates an engine seeded with the 32-bit value `seed` (init_genrand). */
  constructor(seed: number) {
    this.seed(seed);
  }

  /** Re-seeds with init_genrand; `seed` must be an integer in [0, 2**32). */
  seed(seed: number): void {
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
      throw new RangeError(
        `Cannot seed MT19937 with ${seed}: expected an integer in [0, 2**32)`,
      );
    }
    const w = this.#words;
    w[0] = seed;
    for (let i = 1; i < MT_STATE_WORDS; i++) {
      const prev = w[i - 1]!;
      // 1812433253 * (prev ^ (prev >>> 30)) + i, modulo 2**32.
      w[i] = Math.imul(1812433253, prev ^ (prev >>> 30)) + i;
    }
    this.#index = MT_STATE_WORDS;
  }

  /** Returns the next tempered 32-bit output as a number in [0, 2**32). */
  nextU32(): number {
    if (this.#index >= MT_STATE_WORDS) this.#twist();
    let y = this.#words[this.#index++]!;
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /**
   * Writes `(u & 0xFFFFFF) * 2**-24` for the next `to - from` outputs u into
   * out[from..to): uniform_real_distribution<float>(0, 1) as torch draws it.
   */
  fillUnit(out: Float32Array, from: number, to: number): void {
    const native = to - from >= NATIVE_MIN ? cpuRandomCalls() : null;
    if (native) {
      this.#nativeIndex[0] = this.#index;
      native.dt_cpu_mt_unit(
        this.#words,
        this.#nativeIndex,
        out.subarray(from, to),
        BigInt(to - from),
      );
      this.#index = this.#nativeIndex[0]!;
      return;
    }
    for (let i = from; i < to; i++) out[i] = (this.nextU32() & 0xffffff) * TWO_POW_MINUS_24;
  }

  /**
   * Fills `out` with a permutation of 0..out.length-1 as torch's CPU randperm
   * draws it: the identity, then for each i but the last, swap out[i] with
   * out[i + u % (length - i)] for the next output u.
   */
  fillPermutation(out: Int32Array): void {
    const n = out.length;
    const native = n >= NATIVE_MIN ? cpuRandomCalls() : null;
    if (native) {
      this.#nativeIndex[0] = this.#index;
      native.dt_cpu_randperm(this.#words, this.#nativeIndex, out, BigInt(n));
      this.#index = this.#nativeIndex[0]!;
      return;
    }
    for (let i = 0; i < n; i++) out[i] = i;
    for (let i = 0; i < n - 1; i++) {
      const z = this.nextU32() % (n - i);
      const t = out[i]!;
      out[i] = out[i + z]!;
      out[i + z] = t;
    }
  }

  /**
   * out[i] = fmaf(x, span, from) rounded once to float32 for the next unit
   * draws x (torch's uniform_); `fma` is the float32 fused multiply-add used
   * when native code is not available.
   */
  fillUniform(
    out: Float32Array,
    from: number,
    span: number,
    fma: (a: number, b: number, c: number) => number,
  ): void {
    const native = out.length >= NATIVE_MIN ? cpuRandomCalls() : null;
    if (native) {
      this.#nativeIndex[0] = this.#index;
      native.dt_cpu_mt_uniform(this.#words, this.#nativeIndex, out, BigInt(out.length), from, span);
      this.#index = this.#nativeIndex[0]!;
      return;
    }
    for (let i = 0; i < out.length; i++) {
      out[i] = fma((this.nextU32() & 0xffffff) * TWO_POW_MINUS_24, span, from);
    }
  }

  /** Copies the state out; restoring it with setState() continues the identical stream. */
  getState(): Mt19937State {
    return { words: Array.from(this.#words), index: this.#index };
  }

  /** Restores a state taken by getState(), validating every field. */
  setState(state: Mt19937State): void {
    const { words, index } = state;
    if (!Array.isArray(words) || words.length !== MT_STATE_WORDS) {
      throw new RangeError(
        `Cannot restore MT19937 state: expected ${MT_STATE_WORDS} words, got ${
          Array.isArray(words) ? words.length : typeof words
        }`,
      );
    }
    for (let i = 0; i < MT_STATE_WORDS; i++) {
      const v = words[i];
      if (!Number.isInteger(v) || v! < 0 || v! > 0xffffffff) {
        throw new RangeError(
          `Cannot restore MT19937 state: word ${i} is ${v}, expected an integer in [0, 2**32)`,
        );
      }
    }
    if (!Number.isInteger(index) || index < 0 || index > MT_STATE_WORDS) {
      throw new RangeError(
        `Cannot restore MT19937 state: index ${index} is outside [0, ${MT_STATE_WORDS}]`,
      );
    }
    this.#words.set(words);
    this.#index = index;
  }

  /** Regenerates all 624 words (the "twist"), in three loops to avoid a modulo per word. */
  #twist(): void {
    const w = this.#words;
    const n = MT_STATE_WORDS;
    let i = 0;
    for (; i < n - M; i++) {
      const y = (w[i]! & UPPER_MASK) | (w[i + 1]! & LOWER_MASK);
      w[i] = w[i + M]! ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
    }
    for (; i < n - 1; i++) {
      const y = (w[i]! & UPPER_MASK) | (w[i + 1]! & LOWER_MASK);
      w[i] = w[i + M - n]! ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
    }
    const y = (w[n - 1]! & UPPER_MASK) | (w[0]! & LOWER_MASK);
    w[n - 1] = w[M - 1]! ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
    this.#index = 0;
  }
}
