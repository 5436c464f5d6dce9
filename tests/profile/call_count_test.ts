/**
 * DTRAIN_COUNT_CALLS=1: a GPT-mini training loop prints one line per step
 * with its native calls (and, on the emulated GPU, its device launches) per
 * step and per layer; the counts of steps after the first are the same; the
 * step runs on the fused kernels (attention, layer norm with the residual
 * add, epilogue GEMMs, the classifier), not the composed ops; without the
 * variable nothing is printed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO } from "../launch/launch_helpers.ts";
import { HAVE_EMU } from "../gpu/_emu.ts";
import { formatStep } from "../../profile/call_count.ts";

const SCRIPT = join(REPO, "tests/profile/scripts/count_calls_gpt.ts");

async function run(device: string, precision: string, count: boolean) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", join(REPO, "deno.json"), SCRIPT, device, "3", precision],
    env: { NO_COLOR: "1", DTRAIN_COUNT_CALLS: count ? "1" : "0" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout),
    stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, stdout + stderr);
  const lines = stderr.split("\n").filter((l) => l.startsWith("dtrain calls: "));
  const last = stdout.trim().split("\n").at(-1)!;
  return { lines, result: count ? JSON.parse(last) : null };
}

/** The numbers of a step line, without its step index. */
const numbers = (line: string) => line.replace(/^dtrain calls: step \d+: /, "");

function checkFused(symbols: Record<string, number>, layers: number) {
  for (
    const s of ["dt_attention_fwd", "dt_attention_bwd", "dt_layernorm_fwd", "dt_layernorm_bwd"]
  ) {
    assert.ok((symbols[s] ?? 0) >= layers, `${s}: ${symbols[s]} calls for ${layers} layers`);
  }
  for (const s of ["dt_crossentropy_fwd", "dt_crossentropy_bwd", "dt_gemm_ex"]) {
    assert.ok((symbols[s] ?? 0) > 0, `${s} was not called`);
  }
  // no composed attention (T x T softmax), no plain product
  for (const s of ["dt_softmax_fwd", "dt_gemm"]) {
    assert.equal(symbols[s] ?? 0, 0, `${s} was called ${symbols[s]} times`);
  }
}

for (
  const [device, precision] of [["cpu", "f32"], ["cuda-emu", "bf16"], ["cuda-emu", "f32"]] as const
) {
  Deno.test({
    name:
      `DTRAIN_COUNT_CALLS=1 on ${device} (${precision}): one stable line per GPT-mini step, fused kernels`,
    ignore: device === "cuda-emu" && !HAVE_EMU,
    async fn() {
      const { lines, result } = await run(device, precision, true);
      assert.equal(lines.length, 3, lines.join("\n"));
      assert.match(lines[0]!, /^dtrain calls: step 0: \d+ native calls/);
      assert.match(lines[2]!, /; per layer \(3\): [\d.]+ native calls/);
      assert.equal(numbers(lines[2]!), numbers(lines[1]!), "steps 1 and 2 counted differently");
      const { total, layers, symbols } = result;
      assert.equal(Object.keys(layers).filter((k) => k !== "-1").length, 3);
      // the layers count alike, but for the last: its sum feeds ln_f alone, so no second
      // gradient is added to it (the others' feeds the next block's norm and its residual)
      const perLayer = [0, 1, 2].map((i) => layers[i].calls);
      assert.equal(perLayer[1], perLayer[0]);
      assert.ok(perLayer[2] <= perLayer[0] && perLayer[2] >= perLayer[0] - 2, `${perLayer}`);
      assert.ok(total.calls > 3 * perLayer[0]);
      checkFused(symbols, 3);
      if (device === "cuda-emu") {
        assert.match(lines[2]!, /device launches \(\d+ kernels, \d+ matmuls, \d+ copies\)/);
        const work = (c: { launches: number; matmuls: number; copies: number }) =>
          c.launches + c.matmuls + c.copies;
        assert.ok(work(layers[0]) > 0 && work(total) > 3 * work(layers[0]));
        console.log(`${precision}: ${lines[2]}`);
      } else {
        assert.doesNotMatch(lines[2]!, /device launches/);
      }
    },
  });
}

Deno.test("without DTRAIN_COUNT_CALLS=1 nothing is printed", async () => {
  const { lines } = await run("cpu", "f32", false);
  assert.deepEqual(lines, []);
});

Deno.test("formatStep: totals, the mean per layer with its spread, the outside part, the top symbols", () => {
  const c = (calls: number, launches: number) => ({ calls, launches, matmuls: 2, copies: 1 });
  const layers = new Map([[0, c(10, 5)], [1, c(12, 7)], [-1, c(3, 1)]]);
  const line = formatStep(
    4,
    c(25, 13),
    layers,
    new Map([["dt_b", 2], ["dt_a", 2], ["dt_c", 9]]),
    true,
  );
  assert.equal(
    line,
    "dtrain calls: step 4: 25 native calls, 16 device launches (13 kernels, 2 matmuls, 1 copies); " +
      "per layer (2): 11 native calls, 9 device launches (layers 8-10); " +
      "outside the layers: 3 native calls, 4 device launches (1 kernels, 2 matmuls, 1 copies); " +
      "most called: dt_c 9, dt_a 2, dt_b 2",
  );
  assert.equal(
    formatStep(0, c(5, 0), new Map([[-1, c(5, 0)]]), new Map(), false),
    "dtrain calls: step 0: 5 native calls",
  );
});
