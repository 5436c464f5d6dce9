/**
 * Parity of every op of the repository's op fixtures (fixtures/ops.json):
 * each case's inputs go through the dtrain op named by the case, the output
 * is compared, then the fixture's upstream gradient is back-propagated and
 * each input gradient is compared — all under the tolerance the fixture
 * writes beside the tensor (parity/tolerance.ts).
 */
import type { FixtureDir } from "./fixtures.ts";
import type { ParityRow } from "./report.ts";
import { row } from "./report.ts";
import { type FixtureTol, tolRow } from "./tolerance.ts";
import type { StTensor } from "../io/safetensors.ts";
import { fromStTensor } from "../tensor/st_bridge.ts";
import { scope, type Tensor } from "../tensor/tensor.ts";
import { backward } from "../tensor/autograd.ts";
import { conv2d } from "../tensor/ops/conv.ts";
import { adaptiveAvgPool2d, avgPool2d, maxPool2d } from "../tensor/ops/pool.ts";
import { batchNorm } from "../tensor/ops/batchnorm.ts";
import { cat, pad, permute, stack, transpose } from "../tensor/ops/layout.ts";
import { argmax, max, mean, min, sum } from "../tensor/ops/reduce.ts";
import { clamp, exp, log, pow, sigmoid, sqrt, tanh } from "../tensor/ops/unary.ts";
import { div } from "../tensor/ops/elementwise.ts";
import { gather, indexSelect, maskedFill, where } from "../tensor/ops/select.ts";
import { logSoftmax, softmax } from "../tensor/ops/softmax.ts";

/** One case of ops.json. */
interface OpCase {
  name: string;
  op: string;
  // deno-lint-ignore no-explicit-any
  args: Record<string, any>;
  inputs: Record<string, string>;
  outputs: Record<string, { key: string; tol: FixtureTol }>;
  dy: Record<string, string>;
  grads: Record<string, { key: string; tol: FixtureTol }>;
}

type Inputs = Record<string, Tensor>;
type OpFn = (i: Inputs, a: OpCase["args"]) => Record<string, Tensor>;

const out = (t: Tensor) => ({ out: t });
const unaryOps = { exp, log, sigmoid, tanh, sqrt } as const;

/** The dtrain call of each fixture op, from the case's inputs and arguments (torch's names). */
const OPS: Record<string, OpFn> = {
  conv2d: (i, a) =>
    out(conv2d(i.x!, i.weight!, i.bias ?? null, {
      stride: a.stride,
      padding: a.padding,
      dilation: a.dilation,
      groups: a.groups,
    })),
  max_pool2d: (i, a) =>
    out(maxPool2d(i.x!, a.kernel_size, {
      stride: a.stride,
      padding: a.padding,
      dilation: a.dilation,
      ceilMode: a.ceil_mode,
    })),
  avg_pool2d: (i, a) =>
    out(avgPool2d(i.x!, a.kernel_size, {
      stride: a.stride,
      padding: a.padding,
      ceilMode: a.ceil_mode,
      countIncludePad: a.count_include_pad,
      divisorOverride: a.divisor_override,
    })),
  adaptive_avg_pool2d: (i, a) => out(adaptiveAvgPool2d(i.x!, a.output_size)),
  batch_norm: (i, a) => {
    const o = batchNorm(i.x!, i.running_mean!, i.running_var!, {
      weight: i.weight ?? null,
      bias: i.bias ?? null,
      training: a.training,
      momentum: a.momentum,
      eps: a.eps,
    });
    return { out: o, running_mean: i.running_mean!, running_var: i.running_var! };
  },
  pad: (i, a) => out(pad(i.x!, a.pad, { value: a.value })),
  cat: (i, a) => out(cat(a.inputs.map((k: string) => i[k]!), a.dim)),
  stack: (i, a) => out(stack(a.inputs.map((k: string) => i[k]!), a.dim)),
  transpose: (i, a) => out(transpose(i.x!, a.dim0, a.dim1)),
  permute: (i, a) => out(permute(i.x!, a.dims)),
  sum: (i, a) => out(sum(i.x!, a.dim, { keepdim: a.keepdim })),
  mean: (i, a) => out(mean(i.x!, a.dim, { keepdim: a.keepdim })),
  max: (i, a) => {
    const r = max(i.x!, a.dim, { keepdim: a.keepdim });
    return { values: r.values, indices: r.indices };
  },
  min: (i, a) => {
    const r = min(i.x!, a.dim, { keepdim: a.keepdim });
    return { values: r.values, indices: r.indices };
  },
  argmax: (i, a) =>
    out(a.dim === undefined ? argmax(i.x!) : argmax(i.x!, a.dim, { keepdim: a.keepdim })),
  ...Object.fromEntries(
    Object.entries(unaryOps).map(([name, f]) => [name, (i: Inputs) => out(f(i.x!))]),
  ),
  pow: (i, a) => out(pow(i.x!, a.exponent)),
  clamp: (i, a) => out(clamp(i.x!, { min: a.min, max: a.max })),
  div: (i) => out(div(i.a!, i.b!)),
  where: (i) => out(where(i.cond!, i.a!, i.b!)),
  masked_fill: (i, a) => out(maskedFill(i.x!, i.mask!, a.value)),
  gather: (i, a) => out(gather(i.x!, a.dim, i.index!)),
  index_select: (i, a) => out(indexSelect(i.x!, a.dim, i.index!)),
  softmax: (i, a) => out(softmax(i.x!, a.dim)),
  log_softmax: (i, a) => out(logSoftmax(i.x!, a.dim)),
};

/** A fixture tensor's values as numbers (i64 indices included). */
function values(t: StTensor | Tensor): Float64Array {
  const arr = "data" in t ? fromStTensor(t).toArray() : t.toArray();
  return Float64Array.from(arr as ArrayLike<number | bigint>, Number);
}

/** Rows of one case: its outputs, then its input gradients. */
function caseRows(c: OpCase, st: Map<string, StTensor>): ParityRow[] {
  const get = (k: string) => {
    const t = st.get(k);
    if (!t) throw new Error(`ops.safetensors has no tensor "${k}" (case ${c.name})`);
    return t;
  };
  const fn = OPS[c.op];
  if (!fn) return [row(c.name, "op", "known", 1, 0, `no dtrain op for fixture op "${c.op}"`)];
  return scope(() => {
    const inputs: Inputs = {};
    for (const [k, key] of Object.entries(c.inputs)) {
      const t = fromStTensor(get(key), key);
      if (k in c.grads) t.requiresGrad = true;
      inputs[k] = t;
    }
    const rows: ParityRow[] = [];
    const outs = fn(inputs, c.args);
    for (const [k, o] of Object.entries(c.outputs)) {
      const got = outs[k];
      if (!got) {
        rows.push(row(c.name, k, "present", 1, 0, "the op returned no such output"));
        continue;
      }
      const scale = o.tol.scale ? values(get(o.tol.scale)) : null;
      rows.push(tolRow(c.name, k, values(got), values(get(o.key)), o.tol, scale));
    }
    for (const [k, key] of Object.entries(c.dy)) {
      const o = outs[k];
      if (!o?.requiresGrad) continue;
      // An op that changes nothing (a permute to the same order) returns its input itself.
      if (o.node) backward(o, { gradient: fromStTensor(get(key), key) });
      else o.grad = fromStTensor(get(key), key);
    }
    for (const [k, g] of Object.entries(c.grads)) {
      const grad = inputs[k]!.grad;
      const scale = g.tol.scale ? values(get(g.tol.scale)) : null;
      const want = values(get(g.key));
      rows.push(
        grad
          ? tolRow(c.name, `grad ${k}`, values(grad), want, g.tol, scale)
          : (want.every((v) => v === 0)
            ? row(c.name, `grad ${k}`, "mismatches", 0, 0)
            : row(c.name, `grad ${k}`, "present", 1, 0, "no gradient reached the input")),
      );
      grad?.dispose();
    }
    return rows;
  });
}

/** JSON has no infinities: the fixture writes them (and NaN) as strings. */
function numbersIn(v: unknown): unknown {
  if (v === "Infinity" || v === "-Infinity" || v === "NaN") return Number(v);
  if (Array.isArray(v)) return v.map(numbersIn);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, numbersIn(x)]));
  }
  return v;
}

/** Every row of fixtures/ops.json. */
export function opsParityRows(fx: FixtureDir): ParityRow[] {
  const meta = fx.json("ops.json");
  const st = fx.tensors("ops.safetensors");
  return (meta.cases as OpCase[]).flatMap((c) =>
    caseRows({ ...c, args: numbersIn(c.args) as OpCase["args"] }, st)
  );
}
