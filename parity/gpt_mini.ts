/**
 * Parity of the nanoGPT-style model (fixture gpt_mini): logits, loss and
 * every parameter gradient at init, the bf16-autocast loss, and 10 AdamW
 * steps on one batch.
 *
 * Tolerances: logits 1e-5 relative L2 and loss 1e-5 relative (f32 forward:
 * ~1e-6 per op, a handful of ops deep); gradients 1e-4 relative L2 each
 * (backward goes through twice as many roundings, and tiny gradients like
 * the attention biases' amplify them); AdamW losses 1e-4 relative. The bf16
 * loss is allowed 8e-3 relative (bf16's 2^-9 rounding, a few roundings deep).
 */
import { type FixtureDir, stateSources, toFloat32, toTensor } from "./fixtures.ts";
import { maxAbsError, maxRelError, type ParityRow, relL2Error, row } from "./report.ts";
import { scope } from "../tensor/tensor.ts";
import { GPT, type GPTConfig } from "../nn/gpt.ts";
import { AdamW } from "../optim/adamw.ts";
import { backward, noGrad } from "../tensor/autograd.ts";
import { crossEntropy } from "../tensor/ops/nn.ts";
import { autocast } from "../amp/autocast.ts";
import { gradNorm } from "../optim/clip.ts";

/** The model of gpt_mini.json's config, loaded with gpt_mini_params.safetensors. */
export function gptMiniFromFixture(fx: FixtureDir, opts: { maskBuffer?: boolean } = {}): GPT {
  const meta = fx.json("gpt_mini.json");
  const c = meta.config;
  const cfg: GPTConfig = {
    vocabSize: Number(c.vocab_size),
    blockSize: Number(c.block_size),
    nLayer: Number(c.n_layer),
    nHead: Number(c.n_head),
    nEmbd: Number(c.n_embd),
    bias: c.bias !== false,
    dropout: Number(c.dropout ?? 0),
    maskBuffer: opts.maskBuffer ?? false,
  };
  const model = new GPT(cfg);
  model.loadStateDict(stateSources(fx.tensors("gpt_mini_params.safetensors")), {
    strict: false,
  });
  return model;
}

/** Every comparison gpt_mini supports. */
export function gptParityRows(fx: FixtureDir): ParityRow[] {
  if (!fx.has("gpt_mini.json")) return [];
  const meta = fx.json("gpt_mini.json");
  const io = fx.tensors("gpt_mini_io.safetensors");
  const model = gptMiniFromFixture(fx);
  const rows: ParityRow[] = [];
  const c = "gpt_mini";
  const x = toTensor(io.get("x")!).keep(), y = toTensor(io.get("y")!).keep();
  const refLogits = toFloat32(io.get("logits")!, "logits");
  const refGrads = fx.tensors("gpt_mini_grads.safetensors");
  scope(() => {
    const logits = model.forward(x);
    const loss = crossEntropy(logits, y, { ignoreIndex: -1 });
    const got = logits.toArray() as Float32Array;
    rows.push(
      row(
        c,
        "logits at init",
        "rel L2",
        relL2Error(got, refLogits),
        1e-5,
        `max abs ${maxAbsError(got, refLogits).toExponential(2)}`,
      ),
    );
    rows.push(
      row(
        c,
        "loss at init",
        "rel",
        maxRelError([loss.item()], [Number(meta.loss)]),
        1e-5,
      ),
    );
    backward(loss);
    let worst = 0, worstName = "";
    for (const [name, p] of model.namedParameters()) {
      const ref = refGrads.get(name);
      if (!ref) continue;
      const e = relL2Error(
        p.grad!.toArray() as Float32Array,
        toFloat32(ref, name),
      );
      if (!(e <= worst)) [worst, worstName] = [e, name];
    }
    rows.push(
      row(
        c,
        "every parameter gradient",
        "max rel L2",
        worst,
        1e-4,
        `worst ${worstName}`,
      ),
    );
    rows.push(
      row(
        c,
        "grad norm at init",
        "rel",
        maxRelError([gradNorm(model.parameters())], [Number(meta.grad_norm)]),
        1e-5,
      ),
    );
  });
  if (meta.loss_autocast_bf16 !== undefined) {
    const l = noGrad(() =>
      scope(() =>
        autocast(
          "bf16",
          () => crossEntropy(model.forward(x), y, { ignoreIndex: -1 }).item(),
        )
      )
    );
    rows.push(
      row(
        c,
        "bf16 autocast loss",
        "rel",
        maxRelError([l], [Number(meta.loss_autocast_bf16)]),
        8e-3,
      ),
    );
  }
  if (meta.train_losses) {
    const h = meta.adamw ?? {};
    const opt = new AdamW(model.parameters(), {
      lr: Number(h.lr ?? 1e-3),
      betas: [Number(h.betas?.[0] ?? 0.9), Number(h.betas?.[1] ?? 0.999)],
      eps: Number(h.eps ?? 1e-8),
      weightDecay: Number(h.weight_decay ?? 0),
    });
    const losses: number[] = [];
    for (let i = 0; i < meta.train_losses.length; i++) {
      scope(() => {
        opt.zeroGrad();
        const loss = crossEntropy(model.forward(x), y, { ignoreIndex: -1 });
        losses.push(loss.item());
        backward(loss);
        opt.step();
      });
    }
    const after = noGrad(() =>
      scope(() => crossEntropy(model.forward(x), y, { ignoreIndex: -1 }).item())
    );
    rows.push(
      row(
        c,
        `${losses.length} AdamW losses`,
        "max rel",
        maxRelError(losses, meta.train_losses.map(Number)),
        1e-4,
      ),
    );
    rows.push(
      row(
        c,
        "loss after training",
        "rel",
        maxRelError([after], [Number(meta.loss_after_training)]),
        1e-4,
      ),
    );
    if (fx.has("gpt_mini_final.safetensors")) {
      const fin = fx.tensors("gpt_mini_final.safetensors");
      let worst = 0, worstName = "", worstAbs = 0;
      for (const [name, p] of model.namedParameters()) {
        const ref = fin.get(name);
        if (!ref) continue;
        const got = p.toArray() as Float32Array, want = toFloat32(ref, name);
        worstAbs = Math.max(worstAbs, maxAbsError(got, want));
        const e = relL2Error(got, want);
        if (!(e <= worst)) [worst, worstName] = [e, name];
      }
      rows.push(
        row(
          c,
          "final weights",
          "max rel L2",
          worst,
          1e-3,
          `worst ${worstName}, max abs ${worstAbs.toExponential(2)}`,
        ),
      );
    }
  }
  x.dispose();
  y.dispose();
  model.dispose();
  return rows;
}
