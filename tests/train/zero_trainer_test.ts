/**
 * The Trainer with `ddp.shard` (ZeRO-1 "optimizer", ZeRO-2 "gradients") on
 * the toy_mlp fixture under the launcher: the same losses and weights as
 * DDP bit for bit (clipping and accumulation on); a sharded checkpoint (the
 * state consolidated on rank 0) resumes plain DDP, and a plain one resumes
 * ZeRO, bit for bit at the same world size; a ZeRO checkpoint resumes in a
 * single process, and a single process's checkpoint resumes ZeRO on 2 ranks.
 * Every rank prints its memory report at the end of the run.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { maxRelError } from "../../parity/report.ts";
import { readSafetensorsFile } from "../../io/safetensors.ts";

buildNative({ quiet: true });
const SCRIPT = join(REPO, "tests/train/scripts/toy_fixture_train.ts");
const RECIPE = { CLIP: "0.5", ACCUM: "2", EPOCHS: "1" };

interface Outcome {
  losses: number[];
  final: Map<string, Uint8Array>;
  config: Record<string, unknown>;
}

async function train(
  t: TestRun,
  nproc: number,
  runDir: string,
  env: Record<string, string>,
  attempt = 0,
): Promise<Outcome> {
  const out = join(t.dir, "out");
  Deno.mkdirSync(out, { recursive: true });
  const l = t.launch(["--nproc", String(nproc), "--run-dir", runDir, SCRIPT], {
    env: { OUT_DIR: out, ...RECIPE, ...env },
  });
  const r = await t.finish(l, 120_000);
  assert.equal(r.code, 0, `launcher failed:\n${r.stdout}\n${r.stderr}`);
  // every rank's memory report at the end of the run
  for (let rank = 0; rank < nproc; rank++) {
    assert.match(r.stderr, new RegExp(`\\[r${rank}\\] \\[memory\\] rank ${rank}, CPU: peak`));
  }
  const result = JSON.parse(Deno.readTextFileSync(join(out, `result-${attempt}.json`)));
  const final = new Map(
    [...readSafetensorsFile(join(out, `final-${attempt}.safetensors`)).tensors].map((
      [k, v],
    ) => [k, v.data]),
  );
  const config = JSON.parse(Deno.readTextFileSync(join(runDir, "config.json")));
  return { losses: result.losses, final, config };
}

function assertSameBits(a: Map<string, Uint8Array>, b: Map<string, Uint8Array>, what: string) {
  assert.deepEqual([...a.keys()].sort(), [...b.keys()].sort(), what);
  for (const [k, v] of a) assert.deepEqual(b.get(k), v, `${what}: ${k}`);
}

Deno.test("Trainer with ddp.shard: ZeRO-1 and ZeRO-2 give DDP's losses and weights bit for bit, and config.json records the mode", async () => {
  const t = new TestRun();
  try {
    const ddp = await train(t, 2, join(t.dir, "ddp"), { RESUME: "never" });
    for (const shard of ["optimizer", "gradients"]) {
      const z = await train(t, 2, join(t.dir, shard), { RESUME: "never", SHARD: shard });
      assert.deepEqual(z.losses, ddp.losses, `${shard}: losses`);
      assertSameBits(z.final, ddp.final, shard);
      assert.equal(
        JSON.stringify(z.config).includes(`"shard":"${shard}"`),
        true,
        `${shard}: config.json`,
      );
    }
  } finally {
    await t.cleanup();
  }
});

Deno.test("Trainer with ddp.shard: checkpoints move between ZeRO and plain DDP bit for bit, and to and from a single process", async () => {
  const t = new TestRun();
  try {
    const full = await train(t, 2, join(t.dir, "full"), { RESUME: "never" });
    const n = full.losses.length;
    assert.ok(n > 6, `${n} steps`);
    const half = String(Math.floor(n / 2));
    // ZeRO-1 → plain DDP, plain DDP → ZeRO-2: same world size, the same bits as never stopping
    for (const [first, second] of [["optimizer", ""], ["", "gradients"]]) {
      const dir = join(t.dir, `from-${first || "ddp"}`);
      await train(t, 2, dir, { STEPS: half, SHARD: first });
      const rest = await train(t, 2, dir, { SHARD: second }, 1);
      assert.deepEqual(rest.losses, full.losses.slice(Number(half)), `${first} → ${second}`);
      assertSameBits(rest.final, full.final, `${first || "ddp"} → ${second || "ddp"}`);
    }
    // ZeRO-2 on 2 ranks → one process; one process → ZeRO-1 on 2 ranks: another reduction order
    const toOne = join(t.dir, "to-one");
    await train(t, 2, toOne, { STEPS: half, SHARD: "gradients" });
    const one = await train(t, 1, toOne, {}, 1);
    assert.equal(one.losses.length, n - Number(half));
    assert.ok(maxRelError(one.losses, full.losses.slice(Number(half))) < 1e-5, "2 ranks → 1");
    const fromOne = join(t.dir, "from-one");
    await train(t, 1, fromOne, { STEPS: half });
    const two = await train(t, 2, fromOne, { SHARD: "optimizer" }, 1);
    assert.ok(maxRelError(two.losses, full.losses.slice(Number(half))) < 1e-5, "1 rank → 2");
  } finally {
    await t.cleanup();
  }
});
