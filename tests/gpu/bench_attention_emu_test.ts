/**
 * The device bundle's attention micro-benchmark (scripts/gpu_check/bench_attention.ts)
 * runs on the emulated GPU at its tiny size and reports what run.sh reads: a
 * RESULT line with milliseconds per forward + backward, and a SUMMARY line.
 */
import assert from "node:assert/strict";
import { HAVE_EMU } from "./_emu.ts";

const REPO = new URL("../..", import.meta.url).pathname;

Deno.test({
  name: "bench_attention.ts --device cuda-emu --tiny reports ms per forward + backward",
  ignore: !HAVE_EMU,
  async fn() {
    const r = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        `${REPO}deno.json`,
        `${REPO}scripts/gpu_check/bench_attention.ts`,
        "--device",
        "cuda-emu",
        "--tiny",
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const out = new TextDecoder().decode(r.stdout);
    assert.equal(r.code, 0, `${out}${new TextDecoder().decode(r.stderr)}`);
    const line = out.split("\n").find((l) => l.startsWith("RESULT "));
    assert.ok(line, out);
    const res = JSON.parse(line.slice("RESULT ".length));
    assert.equal(res.impl, "dtrain");
    assert.deepEqual([res.B, res.T, res.H, res.D], [2, 80, 2, 64]);
    assert.ok(res.ms > 0 && Number.isFinite(res.tflops), line);
    assert.match(out, /^SUMMARY dtrain attention fwd\+bwd [\d.]+ ms \([\d.]+ TFLOP\/s\)$/m);
  },
});

Deno.test("bench_attention.ts refuses a device it does not measure", async () => {
  const r = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--config",
      `${REPO}deno.json`,
      `${REPO}scripts/gpu_check/bench_attention.ts`,
      "--device",
      "cpu",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.notEqual(r.code, 0);
  assert.match(new TextDecoder().decode(r.stderr), /--device cpu: expected cuda or cuda-emu/);
});
