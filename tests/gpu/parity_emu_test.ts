/**
 * The PyTorch parity fixtures on the emulated GPU, with the CPU's
 * tolerances: `deno task parity --device cuda-emu` over the comparisons that
 * compute on the device (toy MLP variants with AMP and clipping, GPT mini
 * forward/backward/AdamW, checkpoints loaded into a model, the
 * convolutional-network ops of fixtures/, the CNN step and SyncBatchNorm on 2
 * ranks). The device is process-wide, so the comparisons run in a child
 * process.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO } from "../launch/launch_helpers.ts";
import { HAVE_EMU } from "./_emu.ts";

Deno.test({
  name: "parity fixtures on cuda-emu: every device comparison within the CPU's tolerances",
  ignore: !HAVE_EMU,
  async fn() {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        join(REPO, "deno.json"),
        join(REPO, "scripts/parity.ts"),
        "--device",
        "cuda-emu",
        "--only",
        "toy,gpt,checkpoint,ops,cnn,syncbn",
      ],
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, text + new TextDecoder().decode(out.stderr));
    assert.match(text, /^device: cuda-emu \(cuda-emu:0\)$/m);
    const rows = text.split("\n").filter((l) => / (PASS|FAIL)\b/.test(l));
    assert.ok(
      rows.length >= 400,
      `expected the toy, gpt, checkpoint and op rows, got ${rows.length}`,
    );
    assert.deepEqual(rows.filter((r) => /\bFAIL\b/.test(r)), []);
    assert.doesNotMatch(text, /not on this device yet/);
    for (
      const c of [
        "toy_mlp_e",
        "gpt_mini",
        "ckpt_gpt_mini_state_dict.pt",
        "conv2d_0",
        "cnn",
        "syncbn_1",
      ]
    ) {
      assert.ok(rows.some((r) => r.startsWith(c)), `no ${c} rows`);
    }
  },
});
