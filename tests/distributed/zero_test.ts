/**
 * ZeRO-1 and ZeRO-2 (distributed/zero.ts) on 2 shared-memory ranks against
 * plain DDP: bit for bit the same weights and gradient norms after 4 steps
 * with parameter groups, the GradScaler, accumulation and clipping (the
 * reductions are the same sums in rank order: the allReduce and the
 * reduce-scatter average alike); about half of DDP's optimizer state per
 * rank, and under ZeRO-2 about half of its gradients; the consolidated state
 * is DDP's own, and a ZeRO run resumed from DDP's state ends on DDP's weights.
 * The same on 2 emulated GPUs over the NCCL group (its stand-in sums in rank
 * order too, and the sharded norm's per-tensor sums are the GPU's own).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { HAVE_EMU } from "../gpu/_emu.ts";
import { GLOO_MISSING } from "../launch/gloo_helpers.ts";

buildNative({ quiet: true });
const SCRIPT = join(REPO, "tests/distributed/scripts/zero_cases.ts");

async function run(env: Record<string, string>, extra: string[] = []) {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "2", "--log-ranks", "all", ...extra, SCRIPT], { env });
    const r = await t.finish(l, 120_000);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const lines = [...r.stdout.matchAll(/\{"rank".*\}/g)].map((m) => JSON.parse(m[0]));
    assert.equal(lines.length, 2, r.stdout);
    // the memory report, on the device the ranks computed on, with optimizer state in it
    const where = extra.includes("cuda-emu") ? "GPU" : "CPU";
    for (const rank of [0, 1]) {
      assert.match(
        r.stderr,
        new RegExp(
          `\\[r${rank}\\] \\[memory\\] rank ${rank}, ${where}: each kind's own peak: .*optimizer [1-9]`,
        ),
      );
    }
    return lines.sort((a, b) => a.rank - b.rank);
  } finally {
    await t.cleanup();
  }
}

function checkAgainstDdp(ranks: Record<string, unknown>[]): void {
  for (const r of ranks) {
    for (const mode of ["optimizer", "gradients"]) {
      assert.equal(r[`${mode}Weights`], r.ddpWeights, `rank ${r.rank}: ${mode} weights vs DDP`);
      assert.deepEqual(r[`${mode}Norms`], r.ddpNorms, `rank ${r.rank}: ${mode} norms vs DDP`);
      assert.equal(
        r[`${mode}ResumedFromDdp`],
        r.ddpWeights,
        `rank ${r.rank}: ${mode} resumed from DDP's state after 2 steps vs DDP's 4 steps`,
      );
      const share = (r[`${mode}StateBytes`] as number) / (r.ddpStateBytes as number);
      assert.ok(share > 0.2 && share < 0.8, `rank ${r.rank}: ${mode} keeps ${share} of the state`);
    }
    const grads = (r.gradientsGradBytes as number) / (r.ddpGradBytes as number);
    assert.ok(grads > 0.2 && grads < 0.8, `rank ${r.rank}: ZeRO-2 keeps ${grads} of the gradients`);
    assert.equal(r.optimizerGradBytes, r.ddpGradBytes, "ZeRO-1 keeps every gradient");
  }
  assert.equal(ranks[0]!.ddpWeights, ranks[1]!.ddpWeights);
  const total = (m: string) => ranks.reduce((a, r) => a + (r[`${m}StateBytes`] as number), 0);
  assert.equal(total("optimizer"), ranks[0]!.ddpStateBytes, "the shares add up to the whole state");
  assert.equal(ranks[0]!.optimizerConsolidatedEqualsDdp, true, "ZeRO-1's consolidated state");
  assert.equal(ranks[0]!.gradientsConsolidatedEqualsDdp, true, "ZeRO-2's consolidated state");
}

Deno.test("ZeRO-1 and ZeRO-2 with AdamW equal DDP bit for bit (groups, scaler, accumulation, clipping) and resume from its state", async () => {
  checkAgainstDdp(await run({ OPTIM: "adamw" }));
});

Deno.test("ZeRO-1 and ZeRO-2 with SGD momentum equal DDP bit for bit", async () => {
  checkAgainstDdp(await run({ OPTIM: "sgd" }));
});

Deno.test({
  name:
    "ZeRO-1 and ZeRO-2 over the Gloo group equal DDP bit for bit (2 ranks: one sum per element)",
  ignore: GLOO_MISSING !== null,
  async fn() {
    checkAgainstDdp(await run({ OPTIM: "adamw", DTRAIN_CPU_BACKEND: "gloo" }));
  },
});

Deno.test({
  name: "ZeRO-1 and ZeRO-2 on 2 emulated GPUs (NCCL group) equal DDP bit for bit",
  ignore: !HAVE_EMU,
  async fn() {
    checkAgainstDdp(await run({ OPTIM: "adamw" }, ["--device", "cuda-emu"]));
  },
});
