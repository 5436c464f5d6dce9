/**
 * Modules written as PyTorch users write them: layers held in class fields
 * (`fc1 = new Linear(4, 16)`) are registered without a call, in field order,
 * with PyTorch's state_dict names (arrays of modules as nn.ModuleList,
 * "blocks.0.…"); registerModule still works beside them and nothing is
 * registered twice; an optimizer given no parameters is an error.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import { Buffer, Module, Parameter } from "../../nn/module.ts";
import { Layer, Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { manualSeed } from "../../nn/init.ts";
import { fromArray, full, scope, type Tensor, zeros } from "../../tensor/tensor.ts";
import { relu } from "../../tensor/ops/elementwise.ts";
import { crossEntropy } from "../../tensor/ops/nn.ts";
import { backward } from "../../tensor/autograd.ts";
import { AdamW } from "../../optim/adamw.ts";
import { SGD } from "../../optim/sgd.ts";

buildNative({ quiet: true });

class FieldMLP extends Module {
  fc1 = new Linear(4, 16);
  act = new ReLU();
  fc2 = new Linear(16, 2);
  forward(x: Tensor): Tensor {
    return this.fc2.forward(this.act.forward(this.fc1.forward(x)));
  }
}

/** The same kind of model in PyTorch, and what it lists (run when torch is installed). */
const TORCH_NAMES_SCRIPT = `
import json, torch, torch.nn as nn
class FieldMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16); self.act = nn.ReLU(); self.fc2 = nn.Linear(16, 2)
class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(2, 2)
        self.blocks = nn.ModuleList([nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2, bias=False)]),
                                     nn.ModuleList([nn.Linear(2, 2)])])
        self.gains = nn.ParameterList([nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))])
        self.scale = nn.Parameter(torch.ones(1))
        self.register_buffer("steps", torch.zeros(1))
print(json.dumps({"mlp": list(FieldMLP().state_dict().keys()),
                  "nested": list(Nested().state_dict().keys()),
                  "nested_params": [n for n, _ in Nested().named_parameters()]}))
`;

/** PyTorch's names for the models above: from torch itself, or null with the reason it cannot run. */
function torchNames(): { names: Record<string, string[]> } | { skip: string } {
  try {
    const out = new Deno.Command("/usr/bin/python3", {
      args: ["-c", TORCH_NAMES_SCRIPT],
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    if (!out.success) {
      return {
        skip: `PyTorch is not importable by /usr/bin/python3 (${
          new TextDecoder().decode(out.stderr).trim().split("\n").pop()
        })`,
      };
    }
    return { names: JSON.parse(new TextDecoder().decode(out.stdout)) };
  } catch (e) {
    return { skip: `/usr/bin/python3 is not runnable (${(e as Error).message})` };
  }
}

const MLP_NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"];

class Nested extends Module {
  stem = new Linear(2, 2);
  blocks = [[new Linear(2, 2), new Linear(2, 2, { bias: false })], [new Linear(2, 2)]];
  gains = [Parameter(full([2], 1)), Parameter(full([2], 1))];
  scale = Parameter(full([1], 1));
  steps = Buffer(zeros([1]));
  notState = zeros([3]); // a plain tensor attribute: not registered, as in PyTorch
}

const NESTED_NAMES = [
  "scale",
  "stem.weight",
  "stem.bias",
  "blocks.0.0.weight",
  "blocks.0.0.bias",
  "blocks.0.1.weight",
  "blocks.1.0.weight",
  "blocks.1.0.bias",
  "gains.0",
  "gains.1",
];

Deno.test("a Module whose layers are class fields has their parameters, with PyTorch's state_dict names", () => {
  const model = new FieldMLP();
  assert.deepEqual([...model.stateDict().keys()], MLP_NAMES);
  assert.deepEqual(model.namedParameters().map(([n]) => n), MLP_NAMES);
  assert.equal(model.parameters().reduce((n, p) => n + p.numel, 0), 4 * 16 + 16 + 16 * 2 + 2);
  assert.deepEqual(model.children().map(([n]) => n), ["fc1", "act", "fc2"]);
  model.dispose();
});

Deno.test("a field-declared MLP trains: AdamW moves every parameter and the loss falls", () => {
  manualSeed(0);
  const model = new FieldMLP();
  const opt = new AdamW(model.parameters(), { lr: 0.05 });
  const before = model.parameters().map((p) => Float32Array.from(p.toArray() as Float32Array));
  const x = fromArray(new Float32Array([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]), [4, 4])
    .keep();
  const y = fromArray(new Int32Array([0, 1, 0, 1]), [4]).keep();
  const losses: number[] = [];
  for (let step = 0; step < 30; step++) {
    scope(() => {
      opt.zeroGrad();
      const loss = crossEntropy(model.forward(x), y);
      backward(loss);
      losses.push(loss.item());
      opt.step();
    });
  }
  model.parameters().forEach((p, i) => {
    const now = p.toArray() as Float32Array;
    assert.ok(now.some((v, j) => v !== before[i]![j]), `parameter ${i} did not change`);
  });
  assert.ok(losses.at(-1)! < losses[0]! / 4, `loss ${losses[0]} -> ${losses.at(-1)}`);
  x.dispose();
  y.dispose();
  model.dispose();
});

Deno.test("nested arrays of modules are named like nn.ModuleList; Parameter and Buffer fields are registered", () => {
  const m = new Nested();
  assert.deepEqual(m.namedParameters().map(([n]) => n).sort(), [...NESTED_NAMES].sort());
  assert.deepEqual(m.namedBuffers().map(([n]) => n), ["steps"]);
  assert.ok(!m.namedParameters().some(([n]) => n === "notState"));
  const torch = torchNames();
  if ("skip" in torch) {
    console.warn(`module_fields_test: PyTorch's own names not compared: ${torch.skip}`);
  } else {
    assert.deepEqual([...new FieldMLP().stateDict().keys()], torch.names.mlp);
    // PyTorch lists a module's own parameters before its children's: so does dtrain
    assert.deepEqual(m.namedParameters().map(([n]) => n), torch.names.nested_params);
    assert.deepEqual([...m.stateDict().keys()], torch.names.nested);
  }
  m.dispose();
});

class Mixed extends Module {
  first = new Linear(3, 3);
  explicit: Linear;
  heads: Linear[] = [];
  constructor() {
    super();
    // explicit registration beside the fields: held in a field too, and listed once
    this.explicit = this.registerModule("explicit", new Linear(3, 3, { bias: false }));
    for (let i = 0; i < 2; i++) this.heads.push(this.registerModule(`head${i}`, new Linear(3, 1)));
  }
  last = new Linear(3, 2);
}

Deno.test("fields and registerModule together: each module once, explicit ones first, then the fields in order", () => {
  const m = new Mixed();
  assert.deepEqual(m.children().map(([n]) => n), ["explicit", "head0", "head1", "first", "last"]);
  assert.deepEqual([...m.stateDict().keys()], [
    "explicit.weight",
    "head0.weight",
    "head0.bias",
    "head1.weight",
    "head1.bias",
    "first.weight",
    "first.bias",
    "last.weight",
    "last.bias",
  ]);
  assert.equal(m.parameters().length, 9);
  assert.equal(new Set(m.parameters()).size, 9);
  m.dispose();
});

class ScaledLinear extends Linear {
  gain = Parameter(full([2], 1));
  override forward(x: Tensor): Tensor {
    return relu(super.forward(x));
  }
}

Deno.test("a subclass of a layer adds its fields after the layer's own parameters, as super().__init__ does", () => {
  const m = new Sequential(new ScaledLinear(3, 2));
  assert.deepEqual([...m.stateDict().keys()], ["0.weight", "0.bias", "0.gain"]);
  m.dispose();
});

Deno.test("parameters() sees a field assigned after the first walk, and a field given a new module replaces it", () => {
  class Late extends Module {
    a = new Linear(2, 2);
    b: Module | undefined;
  }
  const m = new Late();
  assert.equal(m.parameters().length, 2);
  m.b = new Linear(2, 1, { bias: false });
  assert.deepEqual(m.namedParameters().map(([n]) => n), ["a.weight", "a.bias", "b.weight"]);
  const old = m.a;
  m.a = new Linear(2, 2, { bias: false });
  assert.deepEqual(m.namedParameters().map(([n]) => n), ["a.weight", "b.weight"]);
  assert.ok(!m.parameters().includes(old.weight));
  old.dispose();
  m.dispose();
});

Deno.test("Sequential's own layer list and the GPT-style explicit registrations are not registered again", () => {
  const s = new Sequential(new Linear(2, 2), new ReLU(), new Linear(2, 1));
  assert.deepEqual([...s.stateDict().keys()], ["0.weight", "0.bias", "2.weight", "2.bias"]);
  s.dispose();
});

Deno.test("an array field mixing registered and new modules is an error naming the field", () => {
  class Bad extends Module {
    shared = new Linear(1, 1);
    list: Layer[];
    constructor() {
      super();
      this.list = [this.shared, new Linear(1, 1)];
    }
  }
  const m = new Bad();
  assert.throws(
    () => m.parameters(),
    /field "list" holds 2 modules of which 1 are registered already/,
  );
});

Deno.test("an optimizer given no parameters is an error that says why", () => {
  class Empty extends Module {}
  assert.throws(
    () => new AdamW(new Empty().parameters()),
    /AdamW: got no parameters to optimize .*registered layers/,
  );
  assert.throws(() => new SGD([{ params: [] }], { lr: 0.1 }), /SGD: got no parameters to optimize/);
});
