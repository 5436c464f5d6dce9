/**
 * gpu-check step 6: causal self-attention alone, forward + backward, at
 * GPT-2-124M's shape (batch 8 x 1024 tokens, 12 heads of 64, bf16), through
 * the kernel ABI (dt_attention_fwd/bwd, the tensor-core kernels of
 * kernels/cuda/attention_tc.cu): milliseconds per forward + backward and the
 * TFLOP/s that is, counted as FlashAttention counts it (forward 4·B·H·T²·D,
 * halved for the causal mask; backward 2.5 forwards). Prints a RESULT line
 * (JSON) and a SUMMARY line; run.sh sets it beside
 * bench_attention_torch.py's torch.nn.functional.scaled_dot_product_attention
 * on the same GPU and reports the ratio.
 *
 *   deno run -A scripts/gpu_check/bench_attention.ts [--batch 8] [--seq 1024] [--iters 20]
 *
 * `--device cuda-emu --tiny` (2 x 80 tokens, 2 heads) checks the script on the emulated GPU.
 */
import { parseArgs } from "node:util";
import { setDevice } from "../../tensor/backend.ts";
import { castTensor, empty, fromArray } from "../../tensor/tensor.ts";
import { DTYPE_CODE } from "../../tensor/dtype.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    batch: { type: "string", default: "8" },
    seq: { type: "string", default: "1024" },
    heads: { type: "string", default: "12" },
    "head-dim": { type: "string", default: "64" },
    iters: { type: "string", default: "20" },
    warmup: { type: "string", default: "3" },
    device: { type: "string", default: "cuda" },
    tiny: { type: "boolean", default: false },
  },
});
if (values.device !== "cuda" && values.device !== "cuda-emu") {
  throw new TypeError(`--device ${values.device}: expected cuda or cuda-emu`);
}
const tiny = values.tiny;
const B = tiny ? 2 : Number(values.batch), T = tiny ? 80 : Number(values.seq);
const H = tiny ? 2 : Number(values.heads), D = Number(values["head-dim"]);
const iters = tiny ? 2 : Number(values.iters), warmup = tiny ? 1 : Number(values.warmup);
for (
  const [name, v] of [["batch", B], ["seq", T], ["heads", H], ["head-dim", D], [
    "iters",
    iters,
  ]] as const
) {
  if (!Number.isInteger(v) || v < 1) {
    throw new RangeError(`--${name} ${v}: expected a positive integer`);
  }
}

const k = setDevice(values.device);
const C = H * D;
let seed = 1;
const normals = (n: number) =>
  Float32Array.from({ length: n }, () => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    return (seed / 2 ** 32 - 0.5) * 3.4; // uniform with variance ~1
  });
const qkv = castTensor(fromArray(normals(B * T * 3 * C), [B, T, 3 * C]), "bf16").keep();
const dout = castTensor(fromArray(normals(B * T * C), [B, T, C]), "bf16").keep();
const out = empty([B, T, C], "bf16").keep();
const lse = empty([B, H, T], "f32").keep();
const dqkv = empty([B, T, 3 * C], "bf16").keep();
const code = DTYPE_CODE.bf16, scale = 1 / Math.sqrt(D);
const [b, t, h, d] = [B, T, H, D].map(BigInt) as [bigint, bigint, bigint, bigint];

function fwdBwd(): void {
  k.call.dt_attention_fwd(out.ptr, lse.ptr, qkv.ptr, code, b, t, h, d, 1, scale);
  k.call.dt_attention_bwd(
    dqkv.ptr,
    dout.ptr,
    qkv.ptr,
    out.ptr,
    lse.ptr,
    code,
    b,
    t,
    h,
    d,
    1,
    scale,
  );
}

for (let i = 0; i < warmup; i++) fwdBwd();
k.call.dt_synchronize();
const t0 = performance.now();
for (let i = 0; i < iters; i++) fwdBwd();
k.call.dt_synchronize();
const ms = (performance.now() - t0) / iters;
const flops = 3.5 * (4 * B * H * T * T * D) / 2; // forward + 2.5 forwards of backward, causal half
const tflops = flops / (ms / 1000) / 1e12;
console.log(
  `bench_attention: ${values.device}, B ${B} T ${T} H ${H} D ${D} bf16 causal, ${iters} iterations`,
);
console.log(`RESULT ${JSON.stringify({ impl: "dtrain", ms, tflops, B, T, H, D })}`);
console.log(`SUMMARY dtrain attention fwd+bwd ${ms.toFixed(3)} ms (${tflops.toFixed(1)} TFLOP/s)`);
