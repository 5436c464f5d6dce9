/**
 * Parity of the ToyClassifier trainings (fixture variants a–e): dtrain
 * replays PyTorch's recipe from the same init and data and compares every
 * per-step loss, gradient norm and the final weights.
 *
 * Tolerances (f32): losses 1e-5 relative, final weights 1e-4 relative L2
 * (AdamW's first step turns last-bit differences of near-zero gradients into
 * ~lr-sized moves; the fixture shows PyTorch's own DDP differs from its
 * single process by 2e-6 absolute). bf16 (variant e): bf16 keeps 8
 * significant bits, so one rounding is off by up to 2^-9 ≈ 2e-3 relative;
 * a loss computed from bf16 logits is allowed 4× that (8e-3 relative: the
 * logits pass through two bf16 matmuls), and the trained weights 3e-2
 * relative L2 (AdamW moves ~lr per step whatever the gradient's size, so
 * gradients whose sign flips under bf16 rounding diverge by up to 32 · lr
 * over 32 steps).
 */
import { type FixtureDir, stateSources, toFloat32, toTensor } from "./fixtures.ts";
import { maxAbsError, maxRelError, type ParityRow, relL2Error, row } from "./report.ts";
import { fromArray, scope, type Tensor } from "../tensor/tensor.ts";
import { Linear, ReLU, Sequential } from "../nn/layers.ts";
import { AdamW } from "../optim/adamw.ts";
import { SGD } from "../optim/sgd.ts";
import { clipGradNorm, gradNorm } from "../optim/clip.ts";
import { crossEntropy } from "../tensor/ops/nn.ts";
import { scale } from "../tensor/ops/elementwise.ts";
import { backward } from "../tensor/autograd.ts";
import { autocast } from "../amp/autocast.ts";
import type { Optimizer } from "../optim/optimizer.ts";

/** The fixture's model: Linear(in, hidden), ReLU, Linear(hidden, classes), shaped from the init file. */
export function toyModelFromInit(fx: FixtureDir): Sequential {
  const init = fx.tensors("toy_mlp_init.safetensors");
  const w0 = init.get("0.weight")!, w2 = init.get("2.weight")!;
  const model = new Sequential(
    new Linear(w0.shape[1]!, w0.shape[0]!),
    new ReLU(),
    new Linear(w2.shape[1]!, w2.shape[0]!),
  );
  model.loadStateDict(stateSources(init));
  return model;
}

interface ToyRun {
  losses: number[];
  gradNorms: number[];
  clipReturned: number[];
  microLosses: number[][];
  final: Map<string, Float32Array>;
  step1Grads?: Map<string, Float32Array>;
  step1Params?: Map<string, Float32Array>;
}

/** Trains one variant the way the fixture README describes. */
export function trainToyVariant(fx: FixtureDir, variant: string): ToyRun {
  const meta = fx.json("toy_mlp.json");
  const B = Number(meta.batch_size), steps = Number(meta.steps);
  const data = fx.tensors("toy_mlp_data.safetensors");
  const X = toFloat32(data.get("X")!, "X");
  const features = data.get("X")!.shape[1]!;
  const yAll = toTensor(data.get("y")!);
  const y32 = new Int32Array(yAll.toArray().length);
  (yAll.toArray() as BigInt64Array).forEach((v, i) => (y32[i] = Number(v)));
  yAll.dispose();
  const nBatches = Math.floor(X.length / features / B);
  const model = toyModelFromInit(fx);
  const params = model.parameters();
  const opt: Optimizer<{ lr: number }> = variant === "b"
    ? new SGD(params, { lr: 0.1, momentum: 0.9, weightDecay: 1e-4 })
    : new AdamW(params, { lr: 1e-3 });
  const micro = variant === "d" ? 4 : 1;
  const run: ToyRun = {
    losses: [],
    gradNorms: [],
    clipReturned: [],
    microLosses: [],
    final: new Map(),
  };
  const names = model.namedParameters().map(([n]) => n);
  for (let s = 0; s < steps; s++) {
    const b = s % nBatches;
    scope(() => {
      opt.zeroGrad();
      let stepLoss = 0;
      const mls: number[] = [];
      const mb = B / micro;
      for (let m = 0; m < micro; m++) {
        const r0 = b * B + m * mb;
        const xb = fromArray(X.subarray(r0 * features, (r0 + mb) * features), [
          mb,
          features,
        ]);
        const yb = fromArray(y32.subarray(r0, r0 + mb), [mb]);
        const forward = () => crossEntropy(model.forward(xb), yb);
        const loss: Tensor = variant === "e" ? autocast("bf16", forward) : forward();
        const lv = loss.item();
        if (micro > 1) {
          mls.push(lv);
          const scaled = scale(loss, 1 / micro);
          stepLoss += scaled.item();
          backward(scaled);
        } else {
          stepLoss = lv;
          backward(loss);
        }
      }
      run.losses.push(stepLoss);
      if (micro > 1) run.microLosses.push(mls);
      run.gradNorms.push(gradNorm(params));
      if (s === 0) {
        run.step1Grads = new Map(
          names.map((n, i) => [n, params[i]!.grad!.toArray() as Float32Array]),
        );
      }
      if (variant === "c") run.clipReturned.push(clipGradNorm(params, 1.0));
      opt.step();
      if (s === 0) {
        run.step1Params = new Map(
          names.map((n, i) => [n, params[i]!.toArray() as Float32Array]),
        );
      }
    });
  }
  for (const [n, p] of model.namedParameters()) {
    run.final.set(n, p.toArray() as Float32Array);
  }
  model.dispose();
  return run;
}

/** Concatenation of named tensors in a fixed order, for whole-model error measures. */
function flat(m: Map<string, Float32Array>, names: string[]): Float64Array {
  const parts = names.map((n) => m.get(n)!);
  const out = new Float64Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** Every comparison the toy fixtures support. */
export function toyParityRows(fx: FixtureDir): ParityRow[] {
  const meta = fx.json("toy_mlp.json");
  const rows: ParityRow[] = [];
  for (const v of Object.keys(meta.variants).sort()) {
    const ref = meta.variants[v];
    const file = `toy_mlp_${v}_final.safetensors`;
    if (!fx.has(file)) continue;
    const run = trainToyVariant(fx, v);
    const bf16 = v === "e";
    const c = `toy_mlp_${v}`;
    const lossTol = bf16 ? 8e-3 : 1e-5;
    const weightTol = bf16 ? 3e-2 : 1e-4;
    rows.push(
      row(
        c,
        "per-step losses",
        "max rel",
        maxRelError(run.losses, ref.losses.map(Number)),
        lossTol,
      ),
    );
    rows.push(
      row(
        c,
        "per-step grad norms",
        "max rel",
        maxRelError(run.gradNorms, ref.grad_norms.map(Number)),
        bf16 ? 3e-2 : 1e-4,
      ),
    );
    if (ref.clip_grad_norm_returned) {
      rows.push(
        row(
          c,
          "clip_grad_norm returned",
          "max rel",
          maxRelError(
            run.clipReturned,
            ref.clip_grad_norm_returned.map(Number),
          ),
          1e-4,
        ),
      );
    }
    if (ref.micro_losses) {
      rows.push(
        row(
          c,
          "micro-batch losses",
          "max rel",
          maxRelError(
            run.microLosses.flat(),
            ref.micro_losses.flat().map(Number),
          ),
          1e-5,
        ),
      );
    }
    const finalRef = fx.tensors(file);
    const names = [...finalRef.keys()].sort();
    const refFinal = new Map(
      names.map((n) => [n, toFloat32(finalRef.get(n)!, n)]),
    );
    const a = flat(run.final, names), b = flat(refFinal, names);
    rows.push(
      row(
        c,
        "final weights",
        "rel L2",
        relL2Error(a, b),
        weightTol,
        `max abs ${maxAbsError(a, b).toExponential(2)}`,
      ),
    );
    if (
      v === "a" && fx.has("toy_mlp_a_step1_grads.safetensors") && run.step1Grads
    ) {
      const g = fx.tensors("toy_mlp_a_step1_grads.safetensors");
      const gm = new Map([...g].map(([n, t]) => [n, toFloat32(t, n)]));
      const gn = [...g.keys()].sort();
      rows.push(
        row(
          c,
          "step-1 gradients",
          "rel L2",
          relL2Error(flat(run.step1Grads, gn), flat(gm, gn)),
          1e-5,
        ),
      );
      const p1 = fx.tensors("toy_mlp_a_step1.safetensors");
      const pm = new Map([...p1].map(([n, t]) => [n, toFloat32(t, n)]));
      rows.push(
        row(
          c,
          "step-1 weights",
          "rel L2",
          relL2Error(flat(run.step1Params!, gn), flat(pm, gn)),
          1e-4,
        ),
      );
    }
  }
  return rows;
}
