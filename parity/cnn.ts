/**
 * Parity of the small CNN of fixtures/cnn.json (two conv + batch norm + ReLU
 * + max-pool blocks and a linear head): the torch-saved initial state loads
 * strictly, then one training step is replayed — train-mode logits, loss,
 * every gradient, the state after an SGD step (running statistics and
 * num_batches_tracked included) — and an eval-mode forward.
 *
 * Tolerances (relative L2 per tensor, f32): each layer sums at most a few
 * hundred products (3·3·c1 in a conv, c2·49 in the head), so its outputs
 * carry a relative error of order √K·2⁻²⁴ ≈ 1e-6; the logits and eval logits
 * are allowed 1e-5. Gradients pass back through two batch norms, whose
 * backward subtracts means of products (cancellation can cost an order of
 * magnitude): 1e-4; a conv bias that feeds a batch norm has a zero gradient
 * up to rounding, so its error is measured against sum |dy| (1e-5). The
 * state after the step is param - lr·update with the
 * update far smaller than the param, and running statistics are averages:
 * 1e-5. num_batches_tracked is compared exactly.
 */
import { type FixtureDir, toFloat32 } from "./fixtures.ts";
import { type ParityRow, relL2Error, row } from "./report.ts";
import { fromStTensor } from "../tensor/st_bridge.ts";
import { scope, type Tensor } from "../tensor/tensor.ts";
import { backward, noGrad } from "../tensor/autograd.ts";
import { crossEntropy } from "../tensor/ops/nn.ts";
import { Flatten, Linear, ReLU, Sequential } from "../nn/layers.ts";
import { Conv2d } from "../nn/conv.ts";
import { BatchNorm2d } from "../nn/batchnorm.ts";
import { MaxPool2d } from "../nn/pooling.ts";
import { loadWeights } from "../nn/load.ts";
import { SGD } from "../optim/sgd.ts";
import { join } from "node:path";

/**
 * The fixture's CNN for 28x28 single-channel images: Conv2d(1, c1, 3, pad 1),
 * BatchNorm2d, ReLU, MaxPool2d(2), the same with c2 channels, Flatten,
 * Linear(c2·7·7, 10) — child names "0".."9" as torch.nn.Sequential's.
 */
export function smallCnn(c1: number, c2: number): Sequential {
  return new Sequential(
    new Conv2d(1, c1, 3, { padding: 1 }),
    new BatchNorm2d(c1),
    new ReLU(),
    new MaxPool2d(2),
    new Conv2d(c1, c2, 3, { padding: 1 }),
    new BatchNorm2d(c2),
    new ReLU(),
    new MaxPool2d(2),
    new Flatten(),
    new Linear(c2 * 7 * 7, 10),
  );
}

const FORWARD_TOL = 1e-5, GRAD_TOL = 1e-4, STATE_TOL = 1e-5;

/** Every row of fixtures/cnn.json. */
export function cnnParityRows(fx: FixtureDir): ParityRow[] {
  const meta = fx.json("cnn.json");
  const st = fx.tensors("cnn.safetensors");
  const want = (k: string) => {
    const t = st.get(k);
    if (!t) throw new Error(`cnn.safetensors has no tensor "${k}"`);
    return t;
  };
  const f32 = (k: string) => toFloat32(want(k), k);
  const model = smallCnn(meta.model.c1, meta.model.c2);
  const rows: ParityRow[] = [];
  try {
    loadWeights(model, join(fx.dir, "cnn_init.pt"));
    rows.push(row("cnn", "torch-saved state loads strictly", "errors", 0, 0));
  } catch (e) {
    rows.push(row("cnn", "torch-saved state loads strictly", "errors", 1, 0, (e as Error).message));
    model.dispose();
    return rows;
  }
  const names = model.stateDict();
  const expectedNames = meta.state_names as string[];
  const sameKeys = [...names.keys()].join(",") === expectedNames.join(",");
  rows.push(
    row(
      "cnn",
      "state-dict keys and order",
      "mismatches",
      sameKeys ? 0 : 1,
      0,
      sameKeys ? undefined : [...names.keys()].join(","),
    ),
  );
  const opt = new SGD(model.parameters(), {
    lr: meta.optimizer.lr,
    momentum: meta.optimizer.momentum,
  });
  const l2 = (q: string, got: Tensor, key: string, tol: number) =>
    rows.push(row("cnn", q, "rel L2", relL2Error(got.toArray() as Float32Array, f32(key)), tol));
  scope(() => {
    const x = fromStTensor(want("x")), y = fromStTensor(want("y"));
    model.train();
    opt.zeroGrad();
    const logits = model.forward(x);
    l2("train-mode logits", logits, "logits", FORWARD_TOL);
    const loss = crossEntropy(logits, y);
    l2("loss", loss, "loss", FORWARD_TOL);
    backward(loss);
    for (const [name, p] of model.namedParameters()) {
      if (!st.has(`gscale/${name}`)) {
        l2(`grad ${name}`, p.grad!, `grad/${name}`, GRAD_TOL);
        continue;
      }
      // ~0 up to rounding (a conv bias before a batch norm): measured against sum |dy|
      const got = p.grad!.toArray() as Float32Array,
        ref = f32(`grad/${name}`),
        s = f32(`gscale/${name}`);
      const err = Math.sqrt(
        got.reduce((a, v, i) => a + (v - ref[i]!) ** 2, 0) / s.reduce((a, v) => a + v * v, 0),
      );
      rows.push(row("cnn", `grad ${name} (cancels to ~0)`, "L2 / L2(sum|dy|)", err, FORWARD_TOL));
    }
    opt.step();
  });
  for (const [name, t] of model.stateDict()) {
    if (t.dtype === "i64") {
      const got = Number((t.toArray() as BigInt64Array)[0]);
      const exp = Number((fromStTensor(want(`after/${name}`)).toArray() as BigInt64Array)[0]);
      rows.push(row("cnn", `after step: ${name}`, "abs", Math.abs(got - exp), 0));
    } else {
      l2(`after step: ${name}`, t, `after/${name}`, STATE_TOL);
    }
  }
  scope(() =>
    noGrad(() => {
      model.eval();
      l2(
        "eval-mode logits",
        model.forward(fromStTensor(want("x_eval"))),
        "eval_logits",
        FORWARD_TOL,
      );
    })
  );
  model.dispose();
  return rows;
}
