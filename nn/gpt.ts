/**
 * A GPT in nanoGPT's architecture and with nanoGPT's parameter names:
 * transformer.{wte, wpe, h.{i}.{ln_1, attn.{c_attn, c_proj}, ln_2,
 * mlp.{c_fc, c_proj}}, ln_f} and lm_head tied to wte.
 */
import { Module } from "./module.ts";
import { Dropout, Embedding, GELU, LayerNorm, Linear } from "./layers.ts";
import { checkpoint } from "./checkpoint.ts";
import { getDefaultGenerator, normalTensor } from "./init.ts";
import { fromArray, type Tensor } from "../tensor/tensor.ts";
import { add } from "../tensor/ops/elementwise.ts";
import {
  addLayerNorm,
  causalSelfAttention,
  composedCausalSelfAttention,
  crossEntropy,
  layerNorm,
} from "../tensor/ops/nn.ts";
import { matmulLowPrecision } from "../tensor/matmul_precision.ts";
import { inLayer } from "../profile/call_count.ts";
import { linear } from "../tensor/ops/linalg.ts";
import { noGrad } from "../tensor/autograd.ts";
import type { TorchGenerator } from "../random/torch_generator.ts";
import { kaimingUniformLinear } from "../random/init.ts";

/** Model shape, as nanoGPT's GPTConfig. */
export interface GPTConfig {
  /** Number of token ids (nanoGPT's vocab_size; 50304 for GPT-2's padded vocabulary). */
  vocabSize: number;
  /** Longest sequence: the number of position embeddings (block_size). */
  blockSize: number;
  /** Number of transformer blocks (n_layer). */
  nLayer: number;
  /** Attention heads per block (n_head); must divide nEmbd. */
  nHead: number;
  /** Width of the residual stream (n_embd). */
  nEmbd: number;
  /** dropout probability (0: no dropout layers are applied) */
  dropout?: number;
  /** biases in Linear and LayerNorm (nanoGPT's bias=True) */
  bias?: boolean;
  /** register the causal-mask buffer "attn.bias" as old nanoGPT does (default true) */
  maskBuffer?: boolean;
  /**
   * "fused" (default): one kernel each way, no (B, nHead, T, T) matrix;
   * "composed": scores, masked softmax and product as separate ops (nanoGPT's
   * manual path, which stores the T x T probabilities), for comparisons
   */
  attention?: "fused" | "composed";
  /**
   * Activation checkpointing of every block (nn/checkpoint.ts): a block keeps
   * only its inputs and is recomputed in backward, with its dropout masks
   * replayed; the same gradients, less memory, about one more forward.
   */
  checkpointBlocks?: boolean;
}

/** nanoGPT's CausalSelfAttention: multi-head self-attention with a causal mask (`block.attn`). */
export class CausalSelfAttention extends Module {
  /** The query, key and value projection, C to 3C. */
  readonly c_attn: Linear;
  /** The output projection, C to C. */
  readonly c_proj: Linear;
  /** Dropout after the output projection (child "resid_dropout"). */
  readonly resid: Dropout;
  /** The attention of a model of shape `cfg`, initialised from `gen`. */
  constructor(readonly cfg: GPTConfig, gen: TorchGenerator) {
    super();
    const C = cfg.nEmbd, bias = cfg.bias ?? true;
    this.c_attn = this.registerModule(
      "c_attn",
      new Linear(C, 3 * C, { bias, generator: gen }),
    );
    this.c_proj = this.registerModule(
      "c_proj",
      new Linear(C, C, { bias, generator: gen }),
    );
    this.resid = this.registerModule(
      "resid_dropout",
      new Dropout(cfg.dropout ?? 0),
    );
    if (cfg.maskBuffer ?? true) {
      const T = cfg.blockSize;
      const mask = new Float32Array(T * T);
      for (let i = 0; i < T; i++) mask.fill(1, i * T, i * T + i + 1);
      this.registerBuffer("bias", fromArray(mask, [1, 1, T, T]));
    }
  }
  /** Attention of x (B, T, C) over its earlier positions: (B, T, C). */
  forward(x: Tensor): Tensor {
    const attend = this.cfg.attention === "composed"
      ? composedCausalSelfAttention
      : causalSelfAttention;
    const y = attend(this.c_attn.forward(x), this.cfg.nHead);
    return this.resid.forward(this.c_proj.forward(y));
  }
}

/** nanoGPT's MLP: C to 4C, GELU, 4C to C, dropout (`block.mlp`). */
export class MLP extends Module {
  /** The expansion, C to 4C. */
  readonly c_fc: Linear;
  /** The activation (kept as a child for nanoGPT's module names; forward fuses it into c_fc). */
  readonly gelu = new GELU();
  /** The projection back, 4C to C. */
  readonly c_proj: Linear;
  /** Dropout on the output (child "dropout"). */
  readonly drop: Dropout;
  /** The MLP of a model of shape `cfg`, initialised from `gen`. */
  constructor(cfg: GPTConfig, gen: TorchGenerator) {
    super();
    const C = cfg.nEmbd, bias = cfg.bias ?? true;
    this.c_fc = this.registerModule(
      "c_fc",
      new Linear(C, 4 * C, { bias, generator: gen }),
    );
    this.registerModule("gelu", this.gelu);
    this.c_proj = this.registerModule(
      "c_proj",
      new Linear(4 * C, C, { bias, generator: gen }),
    );
    this.drop = this.registerModule("dropout", new Dropout(cfg.dropout ?? 0));
  }
  /** c_proj(gelu(c_fc(x))) with dropout, x of shape (…, C). */
  forward(x: Tensor): Tensor {
    // c_fc and GELU in one product (the GELU module keeps nanoGPT's module names)
    const fc = this.c_fc;
    const h = linear(x, fc.weight, fc.bias, { activation: "gelu" });
    return this.drop.forward(this.c_proj.forward(h));
  }
}

/** nanoGPT's Block: x + attn(ln_1(x)), then + mlp(ln_2(·)) (`transformer.h[i]`). */
export class Block extends Module {
  /** The layer norm before attention. */
  readonly ln_1: LayerNorm;
  /** The causal self-attention. */
  readonly attn: CausalSelfAttention;
  /** The layer norm before the MLP. */
  readonly ln_2: LayerNorm;
  /** The MLP. */
  readonly mlp: MLP;
  /** A block of a model of shape `cfg`, initialised from `gen`. */
  constructor(cfg: GPTConfig, gen: TorchGenerator) {
    super();
    const bias = cfg.bias ?? true;
    this.ln_1 = this.registerModule("ln_1", new LayerNorm(cfg.nEmbd, { bias }));
    this.attn = this.registerModule("attn", new CausalSelfAttention(cfg, gen));
    this.ln_2 = this.registerModule("ln_2", new LayerNorm(cfg.nEmbd, { bias }));
    this.mlp = this.registerModule("mlp", new MLP(cfg, gen));
  }
  /** The block on the residual stream x (B, T, C). */
  forward(x: Tensor): Tensor {
    const [h, n2] = addNorm(x, this.attn.forward(normed(this.ln_1, x)), this.ln_2);
    return add(h, this.mlp.forward(n2));
  }

  /**
   * The block on x whose ln_1(x) is n1 (computed by the caller, fused into
   * the previous add), returning [x', next(x')]: the residual stream and the
   * next layer norm of it, each add and the norm after it in one kernel.
   */
  forwardNormed(x: Tensor, n1: Tensor, next: LayerNorm): [Tensor, Tensor] {
    const [h, n2] = addNorm(x, this.attn.forward(n1), this.ln_2);
    return addNorm(h, this.mlp.forward(n2), next);
  }
}

/**
 * A block's norms feed only products, so under autocast they are written in
 * its low precision (one rounding, which the product would do anyway).
 */
function normed(ln: LayerNorm, x: Tensor): Tensor {
  return layerNorm(x, ln.weight, ln.bias, ln.eps, { outDtype: matmulLowPrecision() ?? "f32" });
}

/** [x + y, ln(x + y)] in one pass. */
function addNorm(x: Tensor, y: Tensor, ln: LayerNorm): [Tensor, Tensor] {
  return addLayerNorm(x, y, ln.weight, ln.bias, ln.eps, {
    outDtype: matmulLowPrecision() ?? "f32",
  });
}

/** nanoGPT's `model.transformer`: embeddings, the blocks `h` and the final LayerNorm `ln_f`. */
export class Transformer extends Module {
  /** Token embeddings (vocabSize, nEmbd), tied to the output head. */
  readonly wte: Embedding;
  /** Position embeddings (blockSize, nEmbd). */
  readonly wpe: Embedding;
  /** Dropout on the summed embeddings. */
  readonly drop: Dropout;
  /** The blocks, children "h.0", "h.1", …. */
  readonly h: Block[];
  /** The final layer norm. */
  readonly ln_f: LayerNorm;
  /** The body of a model of shape `cfg`, initialised from `gen`. */
  constructor(cfg: GPTConfig, gen: TorchGenerator) {
    super();
    this.wte = this.registerModule(
      "wte",
      new Embedding(cfg.vocabSize, cfg.nEmbd, { generator: gen }),
    );
    this.wpe = this.registerModule(
      "wpe",
      new Embedding(cfg.blockSize, cfg.nEmbd, { generator: gen }),
    );
    this.drop = this.registerModule("drop", new Dropout(cfg.dropout ?? 0));
    const hList = this.registerModule("h", new BlockList());
    this.h = [];
    for (let i = 0; i < cfg.nLayer; i++) {
      this.h.push(hList.add(new Block(cfg, gen)));
    }
    this.ln_f = this.registerModule(
      "ln_f",
      new LayerNorm(cfg.nEmbd, { bias: cfg.bias ?? true }),
    );
  }
}

/** nn.ModuleList: children named "0", "1", … */
class BlockList extends Module {
  #n = 0;
  add<M extends Module>(m: M): M {
    return this.registerModule(String(this.#n++), m);
  }
}

/**
 * The GPT. forward(idx (B, T) i32/i64) returns logits (B, T, vocab);
 * loss(idx, targets) the mean cross-entropy (ignore_index -1, as nanoGPT).
 */
export class GPT extends Module {
  /** Embeddings, blocks and final norm, named as nanoGPT's `transformer.*`. */
  readonly transformer: Transformer;
  /** The model's shape. */
  readonly cfg: GPTConfig;
  #positions = new Map<number, Tensor>();

  /**
   * A GPT of shape `cfg` initialised as nanoGPT's (`generator`: default the global one); throws
   * when nHead does not divide nEmbd.
   *
   * @example
   * ```ts
   * import { GPT, manualSeed } from "dtrain";
   * manualSeed(1337);
   * const model = new GPT({ vocabSize: 65, blockSize: 64, nLayer: 2, nHead: 2, nEmbd: 64, dropout: 0 });
   * ```
   */
  constructor(cfg: GPTConfig, opts: { generator?: TorchGenerator } = {}) {
    super();
    if (cfg.nEmbd % cfg.nHead !== 0) {
      throw new RangeError(`GPT: nEmbd ${cfg.nEmbd} is not divisible by nHead ${cfg.nHead}`);
    }
    if (cfg.attention !== undefined && cfg.attention !== "fused" && cfg.attention !== "composed") {
      throw new RangeError(
        `GPT: attention ${JSON.stringify(cfg.attention)} is not "fused" or "composed"`,
      );
    }
    this.cfg = cfg;
    const gen = opts.generator ?? getDefaultGenerator();
    this.transformer = this.registerModule("transformer", new Transformer(cfg, gen));
    // PyTorch builds lm_head as nn.Linear(C, V, bias=False) before tying it to
    // wte: its default init consumes the generator, so draw (and drop) it too.
    kaimingUniformLinear(gen, cfg.vocabSize, cfg.nEmbd, { bias: false });
    // lm_head shares wte's weight (weight tying): a second name for one tensor.
    this.registerModule("lm_head", new TiedHead(this.transformer.wte.weight));
    this.initWeights(gen);
  }

  /**
   * nanoGPT's init, drawn in PyTorch's order so that a model built after
   * manualSeed(s) equals nanoGPT's built after torch.manual_seed(s):
   * apply(_init_weights) visits wte, wpe, then each block's c_attn, attn
   * c_proj, c_fc, mlp c_proj, and last lm_head (the tied wte, drawn again),
   * drawing N(0, 0.02) weights and zeroing Linear biases; then every
   * c_proj.weight is redrawn from N(0, 0.02 / sqrt(2 n_layer)).
   */
  initWeights(gen: TorchGenerator): void {
    noGrad(() => {
      const redraw = (t: Tensor, std: number) => {
        const n = normalTensor([...t.shape], 0, std, gen);
        t.copyFrom(n);
        n.dispose();
      };
      const tr = this.transformer;
      redraw(tr.wte.weight, 0.02);
      redraw(tr.wpe.weight, 0.02);
      const linears = (b: Block) => [b.attn.c_attn, b.attn.c_proj, b.mlp.c_fc, b.mlp.c_proj];
      for (const b of tr.h) {
        for (const lin of linears(b)) {
          redraw(lin.weight, 0.02);
          lin.bias?.fill(0);
        }
      }
      redraw(tr.wte.weight, 0.02); // as lm_head
      const projStd = 0.02 / Math.sqrt(2 * this.cfg.nLayer);
      for (const b of tr.h) {
        redraw(b.attn.c_proj.weight, projStd);
        redraw(b.mlp.c_proj.weight, projStd);
      }
    });
  }

  /** Logits (B, T, vocab) of token ids (B, T). */
  forward(idx: Tensor): Tensor {
    if (idx.shape.length !== 2) {
      throw new RangeError(
        `GPT.forward: expected idx of shape (B, T), got [${idx.shape}]`,
      );
    }
    const T = idx.shape[1]!;
    if (T > this.cfg.blockSize) {
      throw new RangeError(
        `GPT.forward: sequence length ${T} exceeds block size ${this.cfg.blockSize}`,
      );
    }
    const tr = this.transformer;
    let x = add(tr.wte.forward(idx), tr.wpe.forward(this.#positionIds(T)));
    x = tr.drop.forward(x);
    // each block's residual add is fused with the next norm (the last with ln_f)
    let n = normed(tr.h[0]?.ln_1 ?? tr.ln_f, x);
    const every = this.cfg.checkpointBlocks === true;
    for (const [i, b] of tr.h.entries()) {
      const next = tr.h[i + 1]?.ln_1 ?? tr.ln_f;
      [x, n] = inLayer(
        i,
        () =>
          every
            ? checkpoint((x, n) => b.forwardNormed(x, n, next), x, n)
            : b.forwardNormed(x, n, next),
      );
    }
    return linear(n, tr.wte.weight);
  }

  /** Mean cross-entropy of next-token prediction; targets -1 are ignored. */
  loss(idx: Tensor, targets: Tensor): Tensor {
    return crossEntropy(this.forward(idx), targets, { ignoreIndex: -1 });
  }

  #positionIds(T: number): Tensor {
    let p = this.#positions.get(T);
    if (!p) {
      p = fromArray(Int32Array.from({ length: T }, (_, i) => i), [T]).keep();
      this.#positions.set(T, p);
    }
    return p;
  }

  /** Frees the cached position indices, then the parameters and buffers. */
  override dispose(): void {
    for (const p of this.#positions.values()) p.dispose();
    this.#positions.clear();
    super.dispose();
  }
}

/** Holds the tied lm_head weight under the name "weight". */
class TiedHead extends Module {
  constructor(weight: Tensor) {
    super();
    this.registerParameter("weight", weight);
  }
}
