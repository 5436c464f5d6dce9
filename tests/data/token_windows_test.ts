/**
 * Windows over token files: nanoGPT's random windows (x and y shifted by one,
 * the same for the same (seed, rank, step), other ranks' differ, offsets as
 * torch.randint draws them from the generator the PyTorch twin seeds),
 * consecutive windows sharded by the DistributedSampler, and a sparse 6 GiB
 * file read with a flat peak RSS.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { TokenStream } from "../../data/token_file.ts";
import { RandomWindows, TokenWindows, windowSeed } from "../../data/token_windows.ts";
import { ResumableSampler } from "../../data/resumable_sampler.ts";
import { scope } from "../../tensor/tensor.ts";

buildNative({ quiet: true });

const PYTHON = "/usr/bin/python3";
const torchMissing = (() => {
  try {
    const r = new Deno.Command(PYTHON, { args: ["-c", "import torch"], stderr: "null" })
      .outputSync();
    return r.success ? null : "torch is not importable by /usr/bin/python3";
  } catch {
    return "/usr/bin/python3 is missing";
  }
})();

function withTokens(ids: number[], body: (s: TokenStream) => void): void {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-windows-" });
  try {
    Deno.writeFileSync(join(dir, "train.bin"), new Uint8Array(Uint16Array.from(ids).buffer));
    using s = TokenStream.open(join(dir, "train.bin"));
    body(s);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

const IDS = Array.from({ length: 5000 }, (_, i) => i % 50000);

Deno.test("random windows: y is x shifted by one; a step's windows depend on (seed, rank, step) only", () => {
  withTokens(IDS, (s) => {
    const w = new RandomWindows(s, { block: 16, batch: 4, seed: 1337, rank: 0 });
    scope(() => {
      const [x, y] = w.batch(3);
      const xs = x!.toArray() as Int32Array;
      const ys = y!.toArray() as Int32Array;
      const offs = w.offsets(3);
      for (let b = 0; b < 4; b++) {
        for (let t = 0; t < 16; t++) {
          assert.equal(xs[b * 16 + t], IDS[offs[b]! + t]);
          assert.equal(ys[b * 16 + t], IDS[offs[b]! + t + 1]);
        }
      }
    });
    const again = new RandomWindows(s, { block: 16, batch: 4, seed: 1337, rank: 0 });
    assert.deepEqual(again.offsets(3), w.offsets(3), "a resumed run draws step 3's windows again");
    assert.notDeepEqual(w.offsets(4), w.offsets(3));
    const rank1 = new RandomWindows(s, { block: 16, batch: 4, seed: 1337, rank: 1 });
    assert.notDeepEqual(rank1.offsets(3), w.offsets(3));
    for (let step = 0; step < 200; step++) {
      for (const o of w.offsets(step)) assert.ok(o >= 0 && o + 17 <= IDS.length);
    }
  });
  assert.throws(() => windowSeed(1, -1, 0), /rank must be a non-negative integer/);
});

Deno.test({
  name: `random windows: offsets are torch.randint(len - T, (B,)) of the twin's generator${
    torchMissing ? ` (skipped: ${torchMissing})` : ""
  }`,
  ignore: torchMissing !== null,
  fn() {
    withTokens(IDS, (s) => {
      const w = new RandomWindows(s, { block: 64, batch: 8, seed: 1337, rank: 2 });
      const r = new Deno.Command(PYTHON, {
        args: [
          "-c",
          "import sys, json, torch\n" +
          "sys.path.insert(0, 'scripts/peers')\n" +
          "from token_windows import window_seed\n" +
          "print(json.dumps([torch.randint(5000 - 64, (8,), generator=torch.Generator()" +
          ".manual_seed(window_seed(1337, 2, s))).tolist() for s in range(5)]))",
        ],
      }).outputSync();
      assert.ok(r.success, new TextDecoder().decode(r.stderr));
      const want = JSON.parse(new TextDecoder().decode(r.stdout));
      assert.deepEqual([0, 1, 2, 3, 4].map((k) => w.offsets(k)), want);
    });
  },
});

Deno.test("consecutive windows: every window once across ranks, in the DistributedSampler's shares", () => {
  withTokens(IDS, (s) => {
    const ds = new TokenWindows(s, 100);
    assert.equal(ds.length, 49); // (5000 - 1) / 100
    const seen: number[] = [];
    for (let rank = 0; rank < 3; rank++) {
      const sampler = new ResumableSampler(ds.length, 3, rank, {
        shuffle: true,
        seed: 5,
        dropLast: false,
      });
      sampler.setEpoch(2);
      const idx = sampler.indices();
      seen.push(...idx);
      scope(() => {
        const [x, y] = ds.getBatch(idx.subarray(0, 2));
        const xs = x!.toArray() as Int32Array;
        const ys = y!.toArray() as Int32Array;
        assert.equal(xs[0], IDS[idx[0]! * 100]);
        assert.equal(ys[99], IDS[idx[0]! * 100 + 100]);
        assert.equal(xs[100], IDS[idx[1]! * 100]);
      });
    }
    assert.deepEqual(
      [...new Set(seen)].sort((a, b) => a - b),
      Array.from({ length: 49 }, (_, i) => i),
    );
    assert.throws(
      () => ds.getBatch(Int32Array.of(49)),
      /index 49 \(batch row 0\) is outside \[0, 49\)/,
    );
  });
});

Deno.test("a sparse 6 GiB token file: random windows read with a flat peak RSS", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-sparse-" });
  try {
    const path = join(dir, "train.bin");
    const f = Deno.openSync(path, { create: true, write: true });
    f.truncateSync(6 * 2 ** 30);
    f.close();
    const probe = async (...extra: string[]) => {
      const r = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "tests/data/scripts/token_rss_probe.ts", path, "300", ...extra],
        env: { DTRAIN_NO_CHECK: "1" },
      }).output();
      assert.ok(r.success, new TextDecoder().decode(r.stderr));
      return JSON.parse(new TextDecoder().decode(r.stdout).trim().split("\n").at(-1)!);
    };
    const plain = await probe();
    assert.equal(plain.tokens, 3 * 2 ** 30);
    const grew = plain.read - plain.opened;
    assert.ok(grew < 64 * 1024, `peak RSS grew by ${grew} KiB reading 300 batches of a 6 GiB file`);
    // The measurement sees growth: holding 256 MiB shows in the same figure.
    const holding = await probe("--hold", "256");
    assert.ok(holding.read - holding.opened > 200 * 1024, JSON.stringify(holding));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("consecutive windows resume at another world size: no window skipped, only torch's padding repeated", () => {
  withTokens(IDS, (s) => {
    const ds = new TokenWindows(s, 50); // 99 windows
    const opts = { shuffle: true, seed: 11, dropLast: false };
    // 2 ranks take 4 steps of 5 windows each (40 of the epoch's 100 padded places), then stop
    const seen: number[] = [];
    for (let rank = 0; rank < 2; rank++) {
      const sm = new ResumableSampler(ds.length, 2, rank, opts);
      sm.setEpoch(3);
      seen.push(...sm.indices().subarray(0, 20));
    }
    // 3 ranks resume the same epoch after those 40 places
    for (let rank = 0; rank < 3; rank++) {
      const sm = new ResumableSampler(ds.length, 3, rank, opts);
      sm.resume({ epoch: 3, epochWorldSize: 2, consumed: 40 });
      seen.push(...sm.indices());
      scope(() => {
        const idx = sm.indices().subarray(0, 1);
        const [x] = ds.getBatch(idx);
        assert.equal((x!.toArray() as Int32Array)[0], IDS[idx[0]! * 50]);
      });
    }
    const counts = new Map<number, number>();
    for (const i of seen) counts.set(i, (counts.get(i) ?? 0) + 1);
    assert.equal(counts.size, 99, "every window was seen");
    // torch pads 99 to 100 for 2 ranks (one repeat); the 3-rank remainder of 60 splits evenly
    assert.equal([...counts.values()].filter((c) => c > 1).length, 1);
  });
});
