/**
 * The sharded optimizer (ZeRO-1, ZeRO-2) against plain DDP under the
 * launcher: the same model, data and recipe (AdamW with two parameter
 * groups, or SGD with momentum; the GradScaler; two micro-batches
 * accumulated with noSync; clipping that bites) trained by each mode from
 * the same start. Prints one JSON line per rank: each mode's weight digest,
 * gradient norms and optimizer-state bytes, and the checkpoint round trips:
 * ZeRO's consolidated state against DDP's own, and a ZeRO run resumed from
 * DDP's state against DDP's uninterrupted weights.
 */
import {
  AdamW,
  clipGradNorm,
  crossEntropy,
  DistributedDataParallel,
  fromArray,
  GradScaler,
  initProcessGroup,
  Linear,
  manualSeed,
  type Optimizer,
  type OptimizerState,
  ReLU,
  scope,
  Sequential,
  SGD,
  type Tensor,
  ZeroRedundancyOptimizer,
  zeros,
} from "dtrain";
import { createHash } from "node:crypto";
import { printMemoryReport } from "../../../tensor/memory_kinds.ts";

const pg = initProcessGroup();
const STEPS = 4;
const optName = Deno.env.get("OPTIM") ?? "adamw";
type Mode = "ddp" | "optimizer" | "gradients";

function model(): Sequential {
  manualSeed(7); // rank 0's weights win anyway (DDP broadcasts them)
  return new Sequential(
    new Linear(6, 16),
    new ReLU(),
    new Linear(16, 16),
    new ReLU(),
    new Linear(16, 3),
  );
}

function groupsOf(m: Sequential) {
  const ps = m.parameters();
  const weights = ps.filter((p) => p.shape.length === 2);
  const biases = ps.filter((p) => p.shape.length === 1);
  return [{ params: weights }, { params: biases, weightDecay: 0, lr: 2e-2 }];
}

function optimizerFor(
  mode: Mode,
  ddp: DistributedDataParallel<Sequential>,
): Optimizer<{ lr: number }> {
  const groups = groupsOf(ddp.module);
  if (optName === "sgd") {
    const hyper = { lr: 5e-2, momentum: 0.9, weightDecay: 1e-2 };
    return mode === "ddp"
      ? new SGD(groups, hyper)
      : new ZeroRedundancyOptimizer(groups, { optimizerClass: SGD, ddp, shard: mode, ...hyper });
  }
  const hyper = { lr: 1e-2, weightDecay: 0.1 };
  return mode === "ddp"
    ? new AdamW(groups, hyper)
    : new ZeroRedundancyOptimizer(groups, { optimizerClass: AdamW, ddp, shard: mode, ...hyper });
}

/** This rank's micro-batch `i` of step `s`: different on every rank. */
function batch(s: number, i: number): [Tensor, Tensor] {
  const gen = manualSeed(1000 * s + 10 * i + pg.rank);
  const x = fromArray(gen.normal_(new Float32Array(5 * 6), 0, 1), [5, 6]);
  const y = fromArray(Int32Array.from({ length: 5 }, () => gen.randint(0, 3)), [5]);
  return [x, y];
}

function digest(ts: Tensor[]): string {
  const h = createHash("sha256");
  for (const t of ts) h.update(t.toBytes());
  return h.digest("hex");
}

function stateDigest(s: OptimizerState): string {
  const h = createHash("sha256");
  for (const [k, t] of [...s.tensors].sort(([a], [b]) => a.localeCompare(b))) {
    h.update(k);
    h.update(t.toBytes());
  }
  h.update(JSON.stringify(s.paramGroups));
  return h.digest("hex");
}

function stateBytes(opt: Optimizer<{ lr: number }>): number {
  const own = opt instanceof ZeroRedundancyOptimizer ? opt.local.stateDict() : opt.stateDict();
  let n = 0;
  for (const t of own.tensors.values()) if (t.numel > 1) n += t.bytes;
  return n;
}

interface Run {
  ddp: DistributedDataParallel<Sequential>;
  opt: Optimizer<{ lr: number }>;
  scaler: GradScaler;
  norms: number[];
}

function start(mode: Mode): Run {
  // buckets of a few hundred bytes: several buckets, each split between the ranks
  const ddp = new DistributedDataParallel(model(), pg, { bucketCapMb: 0.0015 });
  const opt = optimizerFor(mode, ddp);
  const scaler = new GradScaler({ initScale: 1024 }, (flag) => {
    pg.allReduce({ ptr: flag.ptr, count: 1, dtype: "f32", device: flag.device }, "max");
  });
  return { ddp, opt, scaler, norms: [] };
}

function step(r: Run, s: number): void {
  const { ddp, opt, scaler } = r;
  scope(() => {
    const [x0, y0] = batch(s, 0);
    ddp.noSync(() => ddp.backward(scaler.scale(crossEntropy(ddp.forward(x0), y0))));
    const [x1, y1] = batch(s, 1);
    ddp.backward(scaler.scale(crossEntropy(ddp.forward(x1), y1)));
    scaler.unscale(opt);
    const norm = opt instanceof ZeroRedundancyOptimizer
      ? opt.clipGradNorm(0.05)
      : clipGradNorm(ddp.parameters(), 0.05);
    r.norms.push(norm);
    scaler.step(opt);
    scaler.update();
    opt.zeroGrad();
  });
}

const out: Record<string, unknown> = { rank: pg.rank, optimizer: optName };
let ddpHalfState: OptimizerState | null = null;
let ddpHalfDigest = "";
for (const mode of ["ddp", "optimizer", "gradients"] as const) {
  const r = start(mode);
  for (let s = 0; s < STEPS; s++) {
    step(r, s);
    if (s === 1) {
      r.opt.consolidateStateDict(0);
      if (pg.rank === 0) {
        const d = stateDigest(r.opt.stateDict());
        if (mode === "ddp") ddpHalfDigest = d;
        else out[`${mode}ConsolidatedEqualsDdp`] = d === ddpHalfDigest;
      }
      if (mode === "ddp") {
        // every rank's plain optimizer holds the whole state: a copy to resume from later
        const st = r.opt.stateDict();
        ddpHalfState = {
          tensors: new Map(
            [...st.tensors].map(([k, t]) => [k, zeros(t.shape, t.dtype).keep().copyFrom(t)]),
          ),
          paramGroups: structuredClone(st.paramGroups),
        };
      }
    }
  }
  out[`${mode}Weights`] = digest(r.ddp.parameters());
  out[`${mode}Norms`] = r.norms;
  out[`${mode}StateBytes`] = stateBytes(r.opt);
  out[`${mode}GradBytes`] = r.ddp.parameters().reduce((a, p) => a + (p.grad?.bytes ?? 0), 0);
  r.ddp.close();
}

// Resume into ZeRO from DDP's state after 2 steps: the weights, then the optimizer state.
for (const mode of ["optimizer", "gradients"] as const) {
  const r = start(mode);
  const ref = start("ddp");
  for (let s = 0; s < 2; s++) step(ref, s); // the weights after 2 steps (the same on every rank)
  r.ddp.parameters().forEach((p, i) => p.copyFrom(ref.ddp.parameters()[i]!));
  ref.ddp.close();
  r.opt.loadStateDict(ddpHalfState!);
  r.scaler.loadStateDict(ref.scaler.stateDict());
  for (let s = 2; s < STEPS; s++) step(r, s);
  out[`${mode}ResumedFromDdp`] = digest(r.ddp.parameters());
  r.ddp.close();
}
console.log(JSON.stringify(out));
printMemoryReport(); // what each rank held: its CPU's, and its GPU's on a GPU rank
pg.close();
