// profile_gpt_step: every kernel call of a GPT-mini step is charged to its role. The counts per
// step follow from the model (4 layers, each with 4 linears, and the lm_head: 17 products of each
// kind; attention forward and backward per layer; 2 layer norms per layer and the final one, each
// forward and backward), so a call charged to the wrong role (a misread transpose flag) or missed
// shows up as a wrong count.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

async function profile(...args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "scripts/profile_gpt_step.ts", ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { ok: out.success, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test("profile_gpt_step charges each kernel call of a GPT-mini step to its role", async () => {
  const r = await profile("--steps", "1", "--warmup", "1", "--peak", "87.4");
  assert.ok(r.ok, r.stderr);
  const rows = new Map<string, string[]>();
  for (const line of r.stdout.split("\n")) {
    const cols = line.trim().split(/\s{2,}/);
    if (cols.length >= 3) rows.set(cols[0]!, cols.slice(1));
  }
  const calls = (role: string) => {
    const row = rows.get(role);
    assert.ok(row, `no row "${role}" in:\n${r.stdout}`);
    return Number(row[3]);
  };
  assert.equal(calls("GEMM forward (NT)"), 17);
  assert.equal(calls("GEMM dX (NN)"), 17);
  assert.equal(calls("GEMM dW (TN)"), 17);
  assert.equal(calls("attention (fused kernel)"), 8);
  assert.equal(calls("layer norm"), 18);
  assert.equal(calls("AdamW"), 1);
  const whole = Number(rows.get("whole step")?.[0]);
  const parts = [...rows].filter(([k]) => k !== "part of the step" && k !== "whole step")
    .reduce((s, [, v]) => s + Number(v[0]), 0);
  assert.ok(
    whole > 0 && Math.abs(parts - whole) < 0.05 * whole,
    `parts ${parts} ms, step ${whole} ms`,
  );
  assert.match(r.stdout, /with every product at the 87\.4 GFLOP\/s peak/);
});

Deno.test("profile_gpt_step --by-shape splits the products by shape and dtype", async () => {
  const r = await profile("--steps", "1", "--warmup", "1", "--by-shape", "--bf16");
  assert.ok(r.ok, r.stderr);
  const calls = new Map<string, number>();
  for (const line of r.stdout.split("\n")) {
    const cols = line.trim().split(/\s{2,}/);
    if (cols.length >= 5) calls.set(cols[0]!, Number(cols[4]));
  }
  // each layer's qkv (128 -> 384), attention projection (128 -> 128), MLP (128 -> 512 -> 128),
  // and the lm_head (128 -> 256): forward M x out x in, dX M x in x out, dW out x in x M
  const linears: [number, number, number][] = [[128, 384, 4], [128, 128, 4], [128, 512, 4], [
    512,
    128,
    4,
  ], [128, 256, 1]];
  const want = new Map<string, number>();
  const add = (k: string, n: number) => want.set(k, (want.get(k) ?? 0) + n);
  for (const [inp, out, n] of linears) {
    add(`GEMM forward (NT) 2048x${out}x${inp} bf16->bf16`, n);
    add(`GEMM dX (NN) 2048x${inp}x${out} bf16->bf16`, n);
    add(`GEMM dW (TN) ${out}x${inp}x2048 bf16->f32`, n);
  }
  for (const [role, n] of want) assert.equal(calls.get(role), n, `${role} in:\n${r.stdout}`);
  const products = [...calls].filter(([k]) => k.startsWith("GEMM "));
  assert.equal(products.length, want.size, r.stdout);
  assert.equal(calls.get("attention (fused kernel) (dt_attention_fwd)"), 4, r.stdout);
  assert.equal(calls.get("attention (fused kernel) (dt_attention_bwd)"), 4, r.stdout);
});

Deno.test("profile_gpt_step refuses a --peak that is not a positive number, naming it", async () => {
  const r = await profile("--peak", "fast");
  assert.ok(!r.ok);
  assert.match(r.stderr, /--peak fast: expected the sgemm peak in GFLOP\/s/);
});
