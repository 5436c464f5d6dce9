/**
 * Parameter groups as PyTorch writes them (`{ params, weightDecay: 0 }`),
 * with a schedule that scales each group's own rate instead of overwriting
 * it; nanoGPT's grouping (decay on matrices only) trained for 12 steps
 * equals PyTorch's AdamW with LambdaLR (Debian's python3-torch, skipped
 * where absent).
 */
import assert from "node:assert/strict";
import { AdamW } from "../../optim/adamw.ts";
import { SGD } from "../../optim/sgd.ts";
import { LrScheduler, warmupCosineLr } from "../../optim/lr_schedule.ts";
import { Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { manualSeed } from "../../nn/init.ts";
import { backward } from "../../tensor/autograd.ts";
import { fromArray, scope, type Tensor } from "../../tensor/tensor.ts";
import { crossEntropy } from "../../tensor/ops/nn.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";

const PYTHON = "/usr/bin/python3";

function hasTorch(): boolean {
  try {
    const probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)";
    return new Deno.Command(PYTHON, { args: ["-c", probe], stdout: "null", stderr: "null" })
      .outputSync().success;
  } catch {
    return false;
  }
}

function leaf(n: number): Tensor {
  const t = fromArray(new Float32Array(n).fill(1)).keep();
  t.requiresGrad = true;
  return t;
}

Deno.test("a schedule scales each group's own learning rate; the first group follows it exactly", () => {
  const a = [leaf(3)], b = [leaf(2)], c = [leaf(1)];
  const opt = new AdamW([{ params: a }, { params: b, lr: 5e-4 }, {
    params: c,
    hyper: { lr: 2e-3 },
  }], {
    lr: 1e-3,
  });
  const fn = warmupCosineLr({ maxLr: 1e-3, minLr: 1e-4, warmupSteps: 3, totalSteps: 20 });
  const schedule = new LrScheduler(opt, fn);
  for (let s = 0; s < 25; s++) {
    const lrs = opt.groups.map((g) => g.hyper.lr);
    assert.equal(lrs[0], fn(s), `step ${s}`);
    assert.ok(Math.abs(lrs[1]! - fn(s) / 2) <= 1e-18, `step ${s}: ${lrs}`);
    assert.ok(Math.abs(lrs[2]! - fn(s) * 2) <= 1e-18, `step ${s}: ${lrs}`);
    schedule.step();
  }
  opt.lr = 0.5;
  assert.deepEqual(opt.groups.map((g) => g.hyper.lr), [0.5, 0.25, 1]);
});

Deno.test("parameter groups name an unknown setting instead of ignoring it", () => {
  assert.throws(
    // @ts-expect-error: weight_decay is PyTorch's spelling
    () => new SGD([{ params: [leaf(1)], weight_decay: 0 }], { lr: 0.1 }),
    /parameter group 0 sets weight_decay, which this optimizer does not have \(it has lr, momentum/,
  );
  // An empty group is allowed, as in torch (nanoGPT's "no decay" group of a model without biases).
  assert.equal(new SGD([{ params: [leaf(1)] }, { params: [] }]).groups.length, 2);
});

const PROGRAM = `
import json, sys, math, torch
d = json.load(sys.stdin)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
with torch.no_grad():
    for p, v in zip(net.parameters(), d["params"]):
        p.copy_(torch.tensor(v, dtype=torch.float32).reshape(p.shape))
decay = [p for p in net.parameters() if p.dim() >= 2]
nodecay = [p for p in net.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": nodecay, "weight_decay": 0.0, "lr": 5e-3}], lr=1e-2)
warm, total, maxlr, minlr = 3, 12, 1e-2, 1e-3
def lr(step):
    if step < warm: return maxlr * (step + 1) / (warm + 1)
    if step >= total: return minlr
    r = (step - warm) / (total - warm)
    return minlr + 0.5 * (1 + math.cos(math.pi * r)) * (maxlr - minlr)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr(s) / maxlr)
x = torch.tensor(d["x"], dtype=torch.float32).reshape(-1, 6)
y = torch.tensor(d["y"], dtype=torch.int64)
losses = []
for step in range(12):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    sched.step()
    losses.append(loss.item())
print(json.dumps({"losses": losses, "params": [p.detach().flatten().tolist() for p in net.parameters()]}))
`;

Deno.test({
  name: "nanoGPT's groups (decay on matrices, none on biases, half the rate) train as PyTorch's",
  ignore: !hasTorch(),
  async fn() {
    manualSeed(0);
    const net = new Sequential(new Linear(6, 16), new ReLU(), new Linear(16, 3));
    const g = new TorchGenerator(5);
    const xs = g.normal_(new Float32Array(32 * 6), 0, 1);
    const ys = Int32Array.from({ length: 32 }, () => g.randint(0, 3));
    const params = net.parameters();
    const input = {
      params: params.map((p) => [...(p.toArray() as Float32Array)]),
      x: [...xs],
      y: [...ys],
    };
    const decay = params.filter((p) => p.shape.length >= 2);
    const nodecay = params.filter((p) => p.shape.length < 2);
    const opt = new AdamW([{ params: decay, weightDecay: 0.1 }, {
      params: nodecay,
      weightDecay: 0,
      lr: 5e-3,
    }], { lr: 1e-2 });
    const schedule = new LrScheduler(
      opt,
      warmupCosineLr({ maxLr: 1e-2, minLr: 1e-3, warmupSteps: 3, totalSteps: 12 }),
    );
    const x = fromArray(xs, [32, 6]), y = fromArray(ys, [32]);
    const losses: number[] = [];
    for (let s = 0; s < 12; s++) {
      losses.push(scope(() => {
        opt.zeroGrad();
        const loss = crossEntropy(net.forward(x), y);
        backward(loss);
        opt.step();
        schedule.step();
        return loss.item();
      }));
    }
    const child = new Deno.Command(PYTHON, {
      args: ["-c", PROGRAM],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(JSON.stringify(input)));
    await w.close();
    const out = await child.output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
    const ref = JSON.parse(new TextDecoder().decode(out.stdout));
    // f32 arithmetic in both; 12 steps through a small MLP: a few roundings per value.
    losses.forEach((l, i) => assert.ok(Math.abs(l - ref.losses[i]) <= 1e-5 * Math.abs(l), `${i}`));
    params.forEach((p, i) => {
      const mine = p.toArray() as Float32Array, theirs = ref.params[i] as number[];
      let num = 0, den = 0;
      mine.forEach((v, j) => {
        num += (v - theirs[j]!) ** 2;
        den += theirs[j]! ** 2;
      });
      assert.ok(Math.sqrt(num / den) < 1e-5, `param ${i}: rel L2 ${Math.sqrt(num / den)}`);
    });
  },
});
