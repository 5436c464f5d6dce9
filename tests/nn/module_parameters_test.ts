/**
 * Module.parameters() and namedParameters() reuse the walk of the tree until
 * a parameter or child is registered anywhere in it: every such change is
 * seen (a child's own, a replaced child, a child added deep down), and the
 * caller always gets an array of its own.
 */
import assert from "node:assert/strict";
import { buildNative } from "../../scripts/build_native.ts";
import type { Module } from "../../nn/module.ts";
import { Layer, Linear, ReLU, Sequential } from "../../nn/layers.ts";
import { type Tensor, zeros } from "../../tensor/tensor.ts";

buildNative({ quiet: true });

class Growing extends Layer {
  forward(x: Tensor): Tensor {
    return x;
  }
  addParam(name: string, n: number): void {
    this.registerParameter(name, zeros([n]));
  }
  addChild(name: string, m: Module): void {
    this.registerModule(name, m);
  }
}

Deno.test("parameters() sees parameters and children registered after an earlier call, at any depth", () => {
  const leaf = new Growing();
  const mid = new Sequential(new Linear(2, 3), leaf);
  const top = new Sequential(mid, new ReLU());
  const names = () => top.namedParameters().map(([n]) => n);
  assert.deepEqual(names(), ["0.0.weight", "0.0.bias"]);
  assert.equal(top.parameters().length, 2);

  leaf.addParam("scale", 3); // deep down: the top module's cached list must not hold
  assert.deepEqual(names(), ["0.0.weight", "0.0.bias", "0.1.scale"]);
  assert.equal(top.parameters()[2]!.shape[0], 3);

  leaf.addChild("extra", new Linear(1, 1, { bias: false }));
  assert.deepEqual(names(), ["0.0.weight", "0.0.bias", "0.1.scale", "0.1.extra.weight"]);

  const replaced = new Linear(2, 5);
  mid.addModule("0", replaced); // replaced in place: same position, new tensors
  const params = top.parameters();
  assert.equal(params[0], replaced.weight);
  assert.equal(params[1], replaced.bias);
  assert.deepEqual(names(), ["0.0.weight", "0.0.bias", "0.1.scale", "0.1.extra.weight"]);
});

Deno.test("parameters() and namedParameters() return arrays the caller may change", () => {
  const m = new Sequential(new Linear(2, 2));
  const a = m.parameters();
  a.pop();
  assert.equal(m.parameters().length, 2);
  const named = m.namedParameters();
  named[0]![0] = "renamed";
  named.length = 0;
  assert.deepEqual(m.namedParameters().map(([n]) => n), ["0.weight", "0.bias"]);
});

Deno.test("parameters() follows a subclass's own namedParameters()", () => {
  class Frozen extends Layer {
    readonly inner = this.registerModule("inner", new Linear(2, 2));
    forward(x: Tensor): Tensor {
      return this.inner.forward(x);
    }
    override namedParameters(): [string, Tensor][] {
      return super.namedParameters().filter(([n]) => n.endsWith("weight"));
    }
  }
  const m = new Frozen();
  assert.deepEqual(m.parameters(), [m.inner.weight]);
});
