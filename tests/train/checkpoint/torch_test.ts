/**
 * A dtrain checkpoint loads in PyTorch with the few lines of
 * scripts/peers/load_dtrain_checkpoint.py: the model's state dict goes into a
 * real nn.Module and every tensor comes back with its exact values. Skipped
 * when /usr/bin/python3 has no torch (Debian's python3-torch).
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { CheckpointManager } from "../../../train/checkpoint/manager.ts";
import { tensor } from "../scripts/checkpoint_payloads.ts";

const PYTHON = "/usr/bin/python3";
const PEERS = fileURLToPath(new URL("../../../scripts/peers/", import.meta.url));

/** Whether PYTHON exists and finds the torch package (a spec lookup: importing torch takes seconds). */
function hasTorch(): boolean {
  try {
    const probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)";
    return new Deno.Command(PYTHON, { args: ["-c", probe], stdout: "null", stderr: "null" })
      .outputSync().success;
  } catch {
    return false; // no /usr/bin/python3 at all
  }
}

/** Loads the checkpoint `latest` names with the snippet, into nn.Sequential(Linear(4,3), ReLU, Linear(3,2)), and reports. */
const PROGRAM = `
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from load_dtrain_checkpoint import latest_checkpoint, load_safetensors, verify

ckpt = latest_checkpoint(sys.argv[2])
verify(ckpt)
model = load_safetensors(ckpt / "model.safetensors")
net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
net.load_state_dict(model)  # strict: names and shapes must match PyTorch's exactly
extra = load_safetensors(ckpt / "extra.safetensors")
state = json.loads((ckpt / "state.json").read_text())
print(json.dumps({
    "dir": ckpt.name,
    "output": net(torch.arange(4, dtype=torch.float32).reshape(1, 4)).flatten().tolist(),
    "tensors": {name: {"dtype": str(t.dtype), "shape": list(t.shape), "values": t.double().flatten().tolist()}
                for name, t in {**model, **extra}.items()},
    "state": state,
}))
`;

if (!hasTorch()) {
  console.warn(
    `tests/train/checkpoint/torch_test.ts: skipped, ${PYTHON} does not find torch (Debian package python3-torch)`,
  );
}

Deno.test({
  name:
    "load_dtrain_checkpoint.py loads a dtrain checkpoint into a PyTorch module with exact values",
  ignore: !hasTorch(),
  fn() {
    const root = Deno.makeTempDirSync({ prefix: "dtrain-ckpt-torch-" });
    try {
      const w0 = new Float32Array([0.5, -1, 0.25, 2, 1, 1, -0.5, 0, 0.1, 0.2, 0.3, 0.4]);
      const b0 = new Float32Array([0.1, -0.2, 0.3]);
      const w2 = new Float32Array([1, -1, 0.5, 2, 0, -3]);
      const b2 = new Float32Array([0.01, -0.02]);
      const model = new Map([
        ["0.weight", tensor("F32", [3, 4], w0)],
        ["0.bias", tensor("F32", [3], b0)],
        ["2.weight", tensor("F32", [2, 3], w2)],
        ["2.bias", tensor("F32", [2], b2)],
      ]);
      const extra = new Map([
        ["bf16", tensor("BF16", [2], new Uint16Array([0x3fc0, 0xc020]))], // 1.5, -2.5
        ["f16", tensor("F16", [2], new Uint16Array([0x3c00, 0xb800]))], // 1, -0.5
        ["counts", tensor("I64", [2, 1], new BigInt64Array([7n, -3n]))],
        ["empty", tensor("F32", [0], new Float32Array(0))],
      ]);
      const state = { epoch: 1, step: 12, world_size: 2, run_id: "torch-interop" };
      const manager = new CheckpointManager(root, { rank: 0, fsync: false });
      manager.save({ step: 11, files: [{ name: "model", tensors: model }], state: { step: 11 } });
      manager.save({
        step: 12,
        files: [{ name: "model", tensors: model }, { name: "extra", tensors: extra }],
        state,
      });

      const run = new Deno.Command(PYTHON, {
        args: ["-c", PROGRAM, PEERS, root],
        stdout: "piped",
        stderr: "piped",
      }).outputSync();
      const stderr = new TextDecoder().decode(run.stderr);
      assert.ok(run.success, `python failed: ${stderr}`);
      const got = JSON.parse(new TextDecoder().decode(run.stdout));

      assert.equal(got.dir, "step-00000012");
      assert.deepEqual(got.state, state);
      const expected: Record<string, { dtype: string; shape: number[]; values: number[] }> = {
        "0.weight": { dtype: "torch.float32", shape: [3, 4], values: [...w0] },
        "0.bias": { dtype: "torch.float32", shape: [3], values: [...b0] },
        "2.weight": { dtype: "torch.float32", shape: [2, 3], values: [...w2] },
        "2.bias": { dtype: "torch.float32", shape: [2], values: [...b2] },
        bf16: { dtype: "torch.bfloat16", shape: [2], values: [1.5, -2.5] },
        f16: { dtype: "torch.float16", shape: [2], values: [1, -0.5] },
        counts: { dtype: "torch.int64", shape: [2, 1], values: [7, -3] },
        empty: { dtype: "torch.float32", shape: [0], values: [] },
      };
      assert.deepEqual(got.tensors, expected);

      // The module's output, computed here in float64 from the same float32 weights.
      const x = [0, 1, 2, 3];
      const hidden = [0, 1, 2].map((i) =>
        Math.max(0, b0[i]! + x.reduce((s, xj, j) => s + w0[i * 4 + j]! * xj, 0))
      );
      const output = [0, 1].map((i) =>
        b2[i]! + hidden.reduce((s, h, j) => s + w2[i * 3 + j]! * h, 0)
      );
      got.output.forEach((v: number, i: number) =>
        assert.ok(Math.abs(v - output[i]!) < 1e-5, `output ${i}: ${v} vs ${output[i]}`)
      );
    } finally {
      Deno.removeSync(root, { recursive: true });
    }
  },
});
