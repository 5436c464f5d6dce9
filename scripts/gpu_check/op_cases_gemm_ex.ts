/**
 * The dt_gemm_ex cases of the op sweep: C of f32 under bf16/f16 operands and
 * every epilogue (bias, bias + GELU with the pre-activation, bias gradient)
 * in the layouts linear layers use — x W^T (+ bias) forward, g W and g^T x
 * backward — plus shapes where cuBLASLt cannot fuse the GELU epilogue (an
 * aux leading dimension that is not a multiple of 8), so the GPU library's
 * own epilogue kernels run too.
 */
import type { KernelSymbols } from "../../ffi/symbols.ts";
import type { NativeLibrary } from "../../ffi/native.ts";
import { type Arr, asNumbers, type Case, type Kind, type Rng, toBf16, toF16 } from "./_harness.ts";
import { linearFwdBounds, linearGradBounds } from "./op_bounds.ts";

/** [M, N, K] of one linear layer: M rows, N outputs, K inputs. */
export type LinearShape = [number, number, number];

/** GPT-2 124M's linear layers at batch 8 x 1024 (the MLP's 3072 and the fused 2304 outputs). */
export const GPU_GEMM_EX: LinearShape[] = [[8192, 3072, 768], [8192, 2304, 768], [1000, 50, 77]];
/** Small: N = 40 lets cuBLASLt fuse the GELU epilogue, N = 37 does not. */
export const EMULATED_GEMM_EX: LinearShape[] = [[33, 40, 24], [17, 37, 9], [0, 5, 3], [4, 6, 0]];

const EPI = { none: 0, bias: 1, gelu: 2, bgrad: 3 } as const;
const DT = { f32: 0, bf16: 1, f16: 2 } as const;

/**
 * Forward, input-gradient and weight-gradient products of each shape, in each dtype. With `cpu`
 * (the op sweep's), every result gets per-element bounds derived from its sums and epilogue
 * (op_bounds.ts); without, a normwise relative error (f32 1e-4, bf16 1e-2, f16 2e-3).
 */
export function gemmExCases(
  rng: Rng,
  shapes: LinearShape[],
  cpu?: NativeLibrary<KernelSymbols>,
): Case[] {
  const cases: Case[] = [];
  const n64 = BigInt;
  for (const [M, N, K] of shapes) {
    for (const ab of ["f32", "bf16", "f16"] as const) {
      const round = (
        x: Float32Array,
      ): Arr => (ab === "f32" ? x : ab === "bf16" ? toBf16(x) : toF16(x));
      const buf = (kind: "f32" | "bf16" | "f16", n: number): Arr =>
        kind === "f32" ? new Float32Array(n) : new Uint16Array(n);
      const x = round(rng.normals(M * K)), w = round(rng.normals(N * K, 0.2));
      const g = round(rng.normals(M * N)), b = round(rng.normals(N));
      const tol = ab === "f32" ? 1e-4 : ab === "bf16" ? 1e-2 : 2e-3;
      const size = `${M}x${N}x${K}`;
      const f32Of = (v: Arr) => Float32Array.from(asNumbers(v, ab));
      // f32 operands accumulate in f32 (TF32's 10-bit mantissa where allowed), bf16/f16 in f32
      const acc = ab === "f32" && Deno.env.get("DTRAIN_ALLOW_TF32") === "1" ? "tf32" : "f32";
      const fwd = (pre: Arr | null) =>
        linearFwdBounds(
          cpu!,
          f32Of(x),
          f32Of(w),
          f32Of(b),
          [M, N, K],
          acc,
          ab,
          pre && asNumbers(pre, ab),
        );
      // forward: y = x W^T (+ bias) (+ gelu), output in the operands' dtype
      for (const epi of ["bias", "gelu"] as const) {
        cases.push({
          op: `gemm_ex x W^T + ${epi}`,
          symbols: ["dt_gemm_ex"],
          dtype: ab,
          size,
          tol,
          ...(cpu
            ? {
              bounds: (ref: (name: string) => Arr) =>
                epi === "gelu"
                  ? (({ pre, y }) => ({ pre, y }))(fwd(ref("pre")))
                  : { y: fwd(null).y },
            }
            : {}),
          inputs: { x, w, b },
          outputs: epi === "gelu"
            ? { y: [buf(ab, M * N), ab as Kind], pre: [buf(ab, M * N), ab as Kind] }
            : { y: [buf(ab, M * N), ab as Kind] },
          call: (k, p, s) =>
            k.dt_gemm_ex(
              DT[ab],
              DT[ab],
              0,
              1,
              n64(M),
              n64(N),
              n64(K),
              1,
              p("x"),
              n64(K),
              p("w"),
              n64(K),
              0,
              p("y"),
              n64(N),
              EPI[epi],
              p("b"),
              p("pre"),
              n64(N),
              s,
            ),
        });
      }
      if (ab === "f32") continue; // below: f32 C of low-precision operands
      const dw0 = rng.normals(N * K);
      const grads = () => linearGradBounds(cpu!, f32Of(g), f32Of(w), f32Of(x), dw0, [M, N, K]);
      // input gradient g W in f32, and the weight gradient accumulated into f32 with the bias gradient
      cases.push({
        op: "gemm_ex g W, C f32",
        symbols: ["dt_gemm_ex"],
        dtype: `${ab}->f32`,
        size,
        tol: 1e-4,
        ...(cpu ? { bounds: () => ({ dx: grads().dx }) } : {}),
        inputs: { g, w },
        outputs: { dx: [new Float32Array(M * K), "f32"] },
        call: (k, p, s) =>
          k.dt_gemm_ex(
            DT[ab],
            0,
            0,
            0,
            n64(M),
            n64(K),
            n64(N),
            1,
            p("g"),
            n64(N),
            p("w"),
            n64(K),
            0,
            p("dx"),
            n64(K),
            EPI.none,
            null,
            null,
            0n,
            s,
          ),
      });
      cases.push({
        op: "gemm_ex dW += g^T x, bias gradient",
        symbols: ["dt_gemm_ex"],
        dtype: `${ab}->f32`,
        size,
        tol: 1e-4,
        ...(cpu ? { bounds: () => ({ dw: grads().dw, db: grads().db }) } : {}),
        inputs: { g, x },
        inout: { dw: [dw0, "f32"] },
        outputs: { db: [new Float32Array(N), "f32"] },
        call: (k, p, s) =>
          k.dt_gemm_ex(
            DT[ab],
            0,
            1,
            0,
            n64(N),
            n64(K),
            n64(M),
            1,
            p("g"),
            n64(N),
            p("x"),
            n64(K),
            1,
            p("dw"),
            n64(K),
            EPI.bgrad,
            p("db"),
            null,
            0n,
            s,
          ),
      });
    }
  }
  return cases;
}

/**
 * Whether cuBLASLt fused each epilogue where it can (no kernel of the GPU
 * library's own ran) and the fallback ran where it cannot: the launches of
 * one x W^T + GELU product on a device library with dt_cuda_work_count.
 */
export function epilogueLaunches(
  gpu: NativeLibrary<KernelSymbols & { dt_cuda_work_count: Deno.ForeignFunction }>,
  stream: Deno.PointerValue,
  M: number,
  N: number,
  K: number,
): { launches: number; matmuls: number } {
  const k = gpu.symbols;
  const dev = (bytes: number) => k.dt_alloc(BigInt(Math.max(bytes, 4)))!;
  const x = dev(M * K * 2),
    w = dev(N * K * 2),
    b = dev(N * 2),
    y = dev(M * N * 2),
    pre = dev(M * N * 2);
  const count = new BigInt64Array(3);
  const read = () => {
    gpu.check(k.dt_cuda_work_count(count) as number, "dt_cuda_work_count");
    return [Number(count[0]), Number(count[1])];
  };
  try {
    const [l0, m0] = read();
    gpu.check(
      k.dt_gemm_ex(
        1,
        1,
        0,
        1,
        BigInt(M),
        BigInt(N),
        BigInt(K),
        1,
        x,
        BigInt(K),
        w,
        BigInt(K),
        0,
        y,
        BigInt(N),
        2,
        b,
        pre,
        BigInt(N),
        stream,
      ),
      "dt_gemm_ex",
    );
    gpu.check(k.dt_synchronize(stream), "dt_synchronize");
    const [l1, m1] = read();
    return { launches: l1! - l0!, matmuls: m1! - m0! };
  } finally {
    for (const p of [x, w, b, y, pre]) k.dt_free(p);
  }
}
