/**
 * The PyTorch fixtures in fixtures/pytorch are the repository generator's
 * output: where PyTorch is installed, scripts/peers/pytorch_fixtures.py makes
 * its quick groups again (the generator draws, the GPT-mini's init, gradients
 * and training) and they equal the committed files value for value and tensor
 * for tensor. Skipped, with the reason, where /usr/bin/python3 has no torch.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const PYTHON = "/usr/bin/python3";
const GENERATOR = `${ROOT}scripts/peers/pytorch_fixtures.py`;
const COMMITTED = `${ROOT}fixtures/pytorch`;

/** Why the generator cannot run here, or null when it can. */
function whyNoTorch(): string | null {
  try {
    const r = new Deno.Command(PYTHON, { args: ["-c", "import torch, numpy"], stderr: "piped" })
      .outputSync();
    if (r.success) return null;
    return `${PYTHON} cannot import torch and numpy (Debian: apt-get install python3-torch python3-numpy): ` +
      new TextDecoder().decode(r.stderr).trim().split("\n").pop();
  } catch (e) {
    return `${PYTHON} is not runnable (${(e as Error).message})`;
  }
}

const skip = whyNoTorch();
if (skip) console.warn(`fixture_generator_test: skipped, ${skip}`);

async function python(args: string[]): Promise<{ code: number; out: string }> {
  const r = await new Deno.Command(PYTHON, { args, stdout: "piped", stderr: "piped" }).output();
  const dec = new TextDecoder();
  return { code: r.code, out: dec.decode(r.stdout) + dec.decode(r.stderr) };
}

Deno.test({
  name: "the repository's generator makes the committed randperm and GPT-mini fixtures again",
  ignore: skip !== null,
  async fn() {
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-fixture-gen-" });
    try {
      const made = await python([GENERATOR, "--out", dir, "--only", "randperm,gpt"]);
      assert.equal(made.code, 0, made.out);
      const files = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
      assert.deepEqual(files, [
        "gpt_mini.json",
        "gpt_mini_final.safetensors",
        "gpt_mini_grads.safetensors",
        "gpt_mini_io.safetensors",
        "gpt_mini_params.safetensors",
        "manifest.json",
        "randperm.json",
      ]);
      const cmp = await python([GENERATOR, "--compare", dir, COMMITTED]);
      assert.equal(cmp.code, 0, cmp.out);
      assert.match(cmp.out, /^0 difference\(s\)$/m);
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "the generator's comparison catches a changed tensor and a changed JSON value",
  ignore: skip !== null,
  async fn() {
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-fixture-cmp-" });
    try {
      for (const f of ["gpt_mini_io.safetensors", "randperm.json"]) {
        Deno.copyFileSync(`${COMMITTED}/${f}`, `${dir}/${f}`);
      }
      const st = Deno.readFileSync(`${dir}/gpt_mini_io.safetensors`);
      st[st.length - 1] ^= 0x01; // the last logit's lowest byte
      Deno.writeFileSync(`${dir}/gpt_mini_io.safetensors`, st);
      // edited as text: a JSON round trip in JavaScript would change the int64 draws as well
      const text = Deno.readTextFileSync(`${dir}/randperm.json`);
      assert.ok(text.includes('"n": 5,'));
      Deno.writeTextFileSync(`${dir}/randperm.json`, text.replace('"n": 5,', '"n": 6,'));
      const cmp = await python([GENERATOR, "--compare", dir, COMMITTED]);
      assert.equal(cmp.code, 1, cmp.out);
      assert.match(cmp.out, /gpt_mini_io\.safetensors: logits differs/);
      assert.match(cmp.out, /randperm\.json: values differ under \['randperm'\]/);
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});
