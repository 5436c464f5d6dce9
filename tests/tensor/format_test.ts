/**
 * Printing tensors: the values read as PyTorch 1.13's `str(tensor)` prints
 * the same elements (compared with Debian's python3-torch when present),
 * followed by shape, dtype, device and the autograd state; console.log uses
 * the same text, and a large tensor prints only its edges.
 */
import assert from "node:assert/strict";
import { castTensor, fromArray, Tensor } from "../../tensor/tensor.ts";
import { type DType } from "../../tensor/dtype.ts";
import { pyExp, pyFixed } from "../../tensor/format.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";
import { mul } from "../../tensor/ops/elementwise.ts";

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

interface Case {
  name: string;
  values: number[];
  shape: number[];
  dtype: DType;
}

const TORCH_DTYPE: Record<DType, string> = {
  f32: "float32",
  bf16: "bfloat16",
  f16: "float16",
  i32: "int32",
  i64: "int64",
  u8: "uint8",
};

function normal(n: number, seed: number, std = 1): number[] {
  return [...new TorchGenerator(seed).normal_(new Float32Array(n), 0, std)];
}

function cases(): Case[] {
  const f = (name: string, values: number[], shape = [values.length]): Case => ({
    name,
    values,
    shape,
    dtype: "f32",
  });
  return [
    f("2x2 mixed", [0.1, -2, 3, 4.5], [2, 2]),
    f("integers in floats", [1, 2, 3, -40]),
    f("small and large: scientific", [1e-5, 1, 3]),
    f("spread over 1000x: scientific", [1e9, 1]),
    f("non-finite", [NaN, 1.5, Infinity, -Infinity]),
    f("ties to even and -0", [0.03125, -0, 0.15625, 0.00015]),
    f("only zeros", [0, 0, 0]),
    f("wraps at 80 columns", normal(50, 1)),
    f("scalar", [2.5], []),
    f("summarised 1-D", normal(2000, 2)),
    f("summarised 2-D", normal(2000, 3, 100), [20, 100]),
    f("summarised 3-D", normal(2400, 4), [10, 12, 20]),
    f("3-D small", normal(24, 5), [2, 3, 4]),
    f("rows under the threshold", normal(1000, 6), [10, 100]),
    f("empty", [], [0, 3]),
    { name: "int32", values: [1, -22, 333], shape: [3], dtype: "i32" },
    { name: "int32 summarised", values: [...Array(1500).keys()], shape: [15, 100], dtype: "i32" },
    { name: "int64", values: [5, -6, 7, 8], shape: [2, 2], dtype: "i64" },
    { name: "uint8", values: [0, 255, 7], shape: [3], dtype: "u8" },
    { name: "bfloat16", values: normal(12, 7), shape: [3, 4], dtype: "bf16" },
    { name: "float16", values: normal(12, 8), shape: [4, 3], dtype: "f16" },
  ];
}

function build(c: Case): Tensor {
  if (c.dtype === "i32") return fromArray(Int32Array.from(c.values), c.shape);
  if (c.dtype === "i64") return fromArray(BigInt64Array.from(c.values.map(BigInt)), c.shape);
  if (c.dtype === "u8") return fromArray(Uint8Array.from(c.values), c.shape);
  const f32 = fromArray(Float32Array.from(c.values), c.shape);
  if (c.dtype === "f32") return f32;
  const low = castTensor(f32, c.dtype);
  f32.dispose();
  return low;
}

/** The values part of dtrain's text: everything before ", shape=". */
function ours(t: Tensor): string {
  const s = String(t);
  return s.slice(0, s.lastIndexOf(", shape="));
}

const PROGRAM = `
import json, sys, torch
cases = json.load(sys.stdin)
out = []
for c in cases:
    vals = [float(v) for v in c["values"]]
    if c["dtype"] in ("int32", "int64", "uint8"):
        t = torch.tensor([int(v) for v in vals], dtype=getattr(torch, c["dtype"]))
    else:
        t = torch.tensor(vals, dtype=torch.float32).to(getattr(torch, c["dtype"]))
    out.append(str(t.reshape(c["shape"])))
print(json.dumps(out))
`;

/** PyTorch's text without its own suffix (", dtype=…", ", size=…") and closing parenthesis. */
function torchValues(s: string): string {
  return s.replace(/(, (dtype|size)=[^\]\n]*?)*\)$/, "");
}

Deno.test({
  name: "String(tensor) prints the values as PyTorch's str(tensor) does",
  ignore: !hasTorch(),
  async fn() {
    const list = cases();
    // Values as text, so NaN, ±Infinity and -0 reach Python (float("-Infinity") parses).
    const input = list.map((c) => ({
      values: c.values.map((v) => (Object.is(v, -0) ? "-0" : String(v))),
      shape: c.shape,
      dtype: TORCH_DTYPE[c.dtype],
    }));
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
    const expected = JSON.parse(new TextDecoder().decode(out.stdout)) as string[];
    list.forEach((c, i) => {
      const t = build(c);
      try {
        assert.equal(ours(t), torchValues(expected[i]!), c.name);
      } finally {
        t.dispose();
      }
    });
  },
});

Deno.test("String(tensor) ends with shape, dtype, device and the autograd state", () => {
  const x = fromArray(new Float32Array([1, 2]), [1, 2]);
  assert.equal(String(x), "tensor([[1., 2.]], shape=[1, 2], dtype=f32, device=cpu)");
  x.requiresGrad = true;
  assert.match(String(x), /, requiresGrad=true\)$/);
  const y = mul(x, x);
  assert.match(String(y), /^tensor\(\[\[1\., 4\.\]\], shape=\[1, 2\], .*gradFn=mul\)$/);
  y.dispose();
  x.dispose();
  assert.equal(
    String(x),
    "tensor(<disposed>, shape=[1, 2], dtype=f32, device=cpu, requiresGrad=true)",
  );
});

Deno.test("console.log(tensor) shows the same text as String(tensor)", () => {
  const x = fromArray(new Float32Array([0.5, -0.25, 3]), [3]);
  try {
    assert.equal(Deno.inspect(x), String(x));
    assert.ok(Deno.inspect({ w: x }).includes(`w: ${String(x)}`), Deno.inspect({ w: x }));
  } finally {
    x.dispose();
  }
});

Deno.test("a tensor of more than 1000 elements prints the first and last 3 of each dimension", () => {
  const n = 4000 * 4000;
  const data = new Float32Array(n);
  data[0] = 1.5;
  data[n - 1] = -2;
  const x = fromArray(data, [4000, 4000]);
  try {
    const s = String(x);
    assert.match(
      s,
      /^tensor\(\[\[ 1\.5000, +0\.0000, +0\.0000, +\.\.\., +0\.0000, +0\.0000, +0\.0000\],/,
    );
    assert.match(s, /-2\.0000\]\], shape=\[4000, 4000\]/);
    assert.equal(s.split("\n").length, 7); // 3 rows, "...", 3 rows
  } finally {
    x.dispose();
  }
});

Deno.test("pyFixed and pyExp round as Python's format does (exactly, ties to even)", () => {
  // [value, '{:.4f}', '{:.0f}', '{:.4e}'] as Python 3 prints them.
  const table: [number, string, string, string][] = [
    [0.03125, "0.0312", "0", "3.1250e-02"],
    [0.09375, "0.0938", "0", "9.3750e-02"],
    [-0, "-0.0000", "-0", "-0.0000e+00"],
    [-0.00001, "-0.0000", "-0", "-1.0000e-05"],
    [2.5, "2.5000", "2", "2.5000e+00"],
    [1e21, "1000000000000000000000.0000", "1000000000000000000000", "1.0000e+21"],
    [9.99995, "10.0000", "10", "1.0000e+01"],
    [-123456789, "-123456789.0000", "-123456789", "-1.2346e+08"],
    [5e-324, "0.0000", "0", "4.9407e-324"],
    [0, "0.0000", "0", "0.0000e+00"],
  ];
  for (const [v, f4, f0, e4] of table) {
    assert.deepEqual([pyFixed(v, 4), pyFixed(v, 0), pyExp(v, 4)], [f4, f0, e4], String(v));
  }
});
