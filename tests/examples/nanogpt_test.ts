/**
 * examples/nanogpt.ts: its first steps' losses equal its PyTorch twin's
 * (scripts/peers/nanogpt.py: same token files, init and batches) within float
 * rounding, with gradient accumulation, clipping, warmup and both bias
 * settings; a run resumed from its checkpoint continues with the losses of
 * the uninterrupted run; it trains on 2 ranks from llm.c's files; and
 * examples/nanogpt_sample.ts writes text from the checkpoint.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { llmcHeader } from "../../data/token_format.ts";

const REPO = new URL("../../", import.meta.url).pathname;
const PYTHON = "/usr/bin/python3";
const torchMissing = (() => {
  try {
    const r = new Deno.Command(PYTHON, { args: ["-c", "import torch, numpy"], stderr: "null" })
      .outputSync();
    return r.success ? null : "torch or numpy is not importable by /usr/bin/python3";
  } catch {
    return "/usr/bin/python3 is missing";
  }
})();

const dec = new TextDecoder();
const SMALL = ["--batch", "4", "--block", "32", "--layers", "2", "--heads", "2", "--width", "64"];

/** A data folder prepared from the design document (GPT-2 ids), shared by the tests. */
const data = (() => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-nanogpt-" });
  const r = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "cli.ts", "prepare", "--quiet", "docs/DESIGN.md", join(dir, "data")],
    cwd: REPO,
  }).outputSync();
  if (!r.success) throw new Error(dec.decode(r.stderr));
  globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
  return dir;
})();

async function dtrain(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const r = await new Deno.Command(join(REPO, "dtrain"), {
    args,
    cwd: data,
    env: { DTRAIN_CUDA: "0", DTRAIN_DEVICE: "cpu", DTRAIN_NO_CHECK: "1" },
  }).output();
  return { code: r.code, out: dec.decode(r.stdout), err: dec.decode(r.stderr) };
}

function lossesOf(out: string): number[] {
  const line = out.split("\n").find((l) => l.includes("LOSSES ["));
  assert.ok(line, `no LOSSES line in:\n${out}`);
  return JSON.parse(line.slice(line.indexOf("LOSSES ") + 7));
}

async function ours(extra: string[], out: string, nproc = 1): Promise<number[]> {
  const r = await dtrain([
    "--nproc",
    String(nproc),
    "--run-dir",
    join(data, "runs", out),
    join(REPO, "examples/nanogpt.ts"),
    "--data",
    "data",
    "--out",
    out,
    "--print-losses",
    "--eval-iters",
    "2",
    ...SMALL,
    ...extra,
  ]);
  assert.equal(r.code, 0, r.err + r.out);
  return lossesOf(r.out);
}

async function twin(extra: string[]): Promise<number[]> {
  const r = await new Deno.Command(PYTHON, {
    args: [
      join(REPO, "scripts/peers/nanogpt.py"),
      "--data",
      join(data, "data"),
      ...SMALL,
      ...extra,
    ],
    env: { OMP_NUM_THREADS: "1" },
  }).output();
  assert.ok(r.success, dec.decode(r.stderr));
  return dec.decode(r.stdout).trim().split("\n").map((l) => JSON.parse(l).loss);
}

function assertClose(got: number[], want: number[], tol: number, what: string): void {
  assert.equal(got.length, want.length, what);
  got.forEach((g, i) =>
    assert.ok(Math.abs(g - want[i]!) <= tol, `${what}: step ${i}: ${g} vs ${want[i]}`)
  );
}

Deno.test({
  name: `the first steps' losses match the PyTorch twin's within float rounding${
    torchMissing ? ` (skipped: ${torchMissing})` : ""
  }`,
  ignore: torchMissing !== null,
  async fn() {
    for (
      const extra of [
        ["--steps", "5", "--warmup", "2"],
        // accumulation, biases, a clip that bites, no warmup, a different seed
        [
          "--steps",
          "4",
          "--warmup",
          "0",
          "--accum",
          "2",
          "--bias",
          "1",
          "--grad-clip",
          "0.05",
          "--seed",
          "7",
          "--lr",
          "1e-3",
        ],
      ]
    ) {
      const [a, b] = await Promise.all([ours(extra, `twin-${extra.join("")}`), twin(extra)]);
      assertClose(a, b, 2e-5, extra.join(" "));
      assert.ok(a[0]! > 10 && a[0]! < 11.5, `step 0 loss ${a[0]} is not near ln(50304)`);
    }
  },
});

Deno.test("a resumed run continues with the uninterrupted run's losses", async () => {
  const common = ["--decay-steps", "6", "--warmup", "2", "--eval-every", "100"];
  const whole = await ours(["--steps", "6", ...common], "whole");
  const first = await ours(["--steps", "3", ...common], "parts");
  const rest = await ours(["--steps", "6", "--resume", ...common], "parts");
  assert.deepEqual(first, whole.slice(0, 3));
  assertClose(rest, whole.slice(3), 1e-5, "resumed");
});

Deno.test("2 ranks train from llm.c's files; the sampler writes text from the checkpoint", async () => {
  const llmc = join(data, "llmc");
  Deno.mkdirSync(llmc);
  for (const split of ["train", "val"]) {
    const ids = Deno.readFileSync(join(data, "data", `${split}.bin`));
    const out = new Uint8Array(1024 + ids.length);
    out.set(llmcHeader(ids.length / 2));
    out.set(ids, 1024);
    Deno.writeFileSync(join(llmc, `tiny_${split}_000000.bin`), out);
  }
  Deno.copyFileSync(join(data, "data/meta.json"), join(llmc, "meta.json"));
  const r = await dtrain([
    "--nproc",
    "2",
    join(REPO, "examples/nanogpt.ts"),
    "--data",
    "llmc",
    "--out",
    "two",
    "--steps",
    "3",
    "--eval-every",
    "2",
    "--eval-iters",
    "1",
    "--dtype",
    "bf16",
    ...SMALL,
  ]);
  assert.equal(r.code, 0, r.err + r.out);
  assert.match(r.out, /step 2: val loss \d+\.\d+/);
  assert.match(r.out, /step 3: val loss \d+\.\d+/);
  const s = await dtrain([
    "exec",
    join(REPO, "examples/nanogpt_sample.ts"),
    "--out",
    "two",
    "--start",
    "The launcher",
    "--tokens",
    "12",
    "--temperature",
    "0.8",
    "--top-k",
    "20",
  ]);
  assert.equal(s.code, 0, s.err + s.out);
  assert.match(s.out, /^The launcher/m);
  assert.ok(s.out.trim().length > "The launcher".length, s.out);
});
