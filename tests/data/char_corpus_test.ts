/**
 * The character corpus and its windows: file selection, order and split on a
 * synthetic folder (always run) and on Debian's fortunes against the peer's
 * recorded size and Python's own listing; windows with targets shifted by one;
 * and random offsets and batches identical to the peer's get_batch in real
 * PyTorch (skipped without fortunes, or without torch in /usr/bin/python3).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import {
  CHAR_BLOCK,
  CharWindows,
  FORTUNES_DIR,
  loadCharCorpus,
  TRAIN_FRACTION,
} from "../../data/char_corpus.ts";
import { TorchGenerator } from "../../random/torch_generator.ts";
import { scope } from "../../tensor/tensor.ts";

buildNative({ quiet: true });

const PYTHON = "/usr/bin/python3";
const REAL_DIR = Deno.env.get("DTRAIN_CHAR_CORPUS") ?? FORTUNES_DIR;
/** Size and file count of the corpus with fortunes 1:1.99.1-7.3 (scripts/peers/pytorch/results.md). */
const PEER_CORPUS_BYTES = 2576674;
const PEER_CORPUS_FILES = 43;

const hasCorpus = (() => {
  try {
    return Deno.statSync(join(REAL_DIR, "fortunes")).isFile;
  } catch {
    return false;
  }
})();

/** Whether PYTHON exists and finds `module` (a spec lookup: importing torch takes seconds). */
function pythonHas(module: string): boolean {
  try {
    const probe =
      `import importlib.util, sys; sys.exit(importlib.util.find_spec('${module}') is None)`;
    return new Deno.Command(PYTHON, { args: ["-c", probe], stdout: "null", stderr: "null" })
      .outputSync().success;
  } catch {
    return false;
  }
}

const hasPython = hasCorpus && pythonHas("json");
const hasTorch = hasPython && pythonHas("torch");
if (!hasCorpus) {
  console.warn(
    `char_corpus_test: real-corpus tests skipped: no fortunes in ${REAL_DIR} (apt-get install fortunes)`,
  );
} else if (!hasTorch) {
  console.warn(`char_corpus_test: torch comparison skipped: ${PYTHON} lacks torch`);
}

/** Runs a Python program and parses the JSON it prints. */
async function python<T>(program: string, ...args: string[]): Promise<T> {
  const out = await new Deno.Command(PYTHON, { args: ["-c", program, ...args] }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return JSON.parse(new TextDecoder().decode(out.stdout)) as T;
}

/** The batch at `offsets` as plain arrays [x, y], checking both are i32 (B, T). */
function windows(ds: CharWindows, offsets: Int32Array): [Int32Array, Int32Array] {
  return scope(() => {
    const [x, y] = ds.getBatch(offsets);
    for (const t of [x!, y!]) {
      assert.deepEqual([t.shape, t.dtype], [[offsets.length, ds.block], "i32"]);
    }
    return [x!.toArray() as Int32Array, y!.toArray() as Int32Array];
  });
}

Deno.test("loadCharCorpus() concatenates the non-.dat/.u8 regular files sorted by name and splits 90/10", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-corpus-" });
  try {
    const text = (s: string) => new TextEncoder().encode(s);
    Deno.writeFileSync(join(dir, "b"), text("bbbbbbbbbb"));
    Deno.writeFileSync(join(dir, "a"), text("aaaaaaa\n"));
    Deno.writeFileSync(join(dir, "a.dat"), text("index"));
    Deno.symlinkSync(join(dir, "a"), join(dir, "a.u8"));
    Deno.symlinkSync(join(dir, "b"), join(dir, "c-link")); // a link to a file counts, as os.path.isfile
    Deno.symlinkSync(join(dir, "gone"), join(dir, "dangling"));
    Deno.mkdirSync(join(dir, "B-subdir"));
    const corpus = loadCharCorpus(dir);
    assert.deepEqual(corpus.names, ["a", "b", "c-link"]);
    assert.equal(corpus.files, 3);
    const all = "aaaaaaa\n" + "bbbbbbbbbb" + "bbbbbbbbbb";
    const cut = Math.floor(TRAIN_FRACTION * all.length); // int(0.9 * 28) = 25
    assert.equal(cut, 25);
    assert.equal(new TextDecoder().decode(corpus.train), all.slice(0, cut));
    assert.equal(new TextDecoder().decode(corpus.val), all.slice(cut));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("loadCharCorpus() names the Debian package when the folder is missing or empty", () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-corpus-empty-" });
  try {
    assert.throws(() => loadCharCorpus(join(dir, "absent")), /apt-get install fortunes/);
    Deno.writeFileSync(join(dir, "x.dat"), new Uint8Array(3));
    assert.throws(() => loadCharCorpus(dir), /found 0 text files holding 0 bytes/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("CharWindows.getBatch() returns x = bytes [o, o+T) and y = bytes [o+1, o+T+1) as i32", () => {
  const data = Uint8Array.from({ length: 50 }, (_, i) => (i * 31 + 7) % 256);
  const ds = new CharWindows(data, 8);
  assert.equal(ds.length, 50 - 8); // every complete window of 9 bytes
  const offsets = new Int32Array([0, 41, 17, 17]);
  const [x, y] = windows(ds, offsets);
  offsets.forEach((o, b) => {
    assert.deepEqual([...x.subarray(b * 8, b * 8 + 8)], [...data.subarray(o, o + 8)]);
    assert.deepEqual([...y.subarray(b * 8, b * 8 + 8)], [...data.subarray(o + 1, o + 9)]);
  });
  assert.equal(y[8 * 2 - 1], data[50 - 1]); // the last window reaches the last byte
});

Deno.test("CharWindows refuses offsets past the last window and data shorter than a window", () => {
  const ds = new CharWindows(new Uint8Array(20), 8);
  assert.throws(
    () => ds.getBatch(new Int32Array([3, 12])),
    /offset 12 \(batch row 1\) is outside \[0, 12\)/,
  );
  assert.throws(() => ds.getBatch(new Int32Array([-1])), /offset -1/);
  assert.throws(
    () => new CharWindows(new Uint8Array(8), 8),
    /8 bytes hold no window of block \+ 1 = 9/,
  );
  assert.throws(
    () => new CharWindows(new Uint8Array(9), 8).randomOffsets(new TorchGenerator(0), 1),
    /randint\(0, 0\)/,
  );
});

Deno.test("CharWindows.randomOffsets() draws randint(0, len - (T + 1)) per sample and randomWindowBatch() fetches them", () => {
  const data = Uint8Array.from({ length: 300 }, (_, i) => i % 251);
  const ds = new CharWindows(data, 16);
  const offsets = ds.randomOffsets(new TorchGenerator(7), 64);
  const reference = new TorchGenerator(7);
  assert.deepEqual([...offsets], Array.from({ length: 64 }, () => reference.randint(0, 300 - 17)));
  assert.ok(new Set(offsets).size > 32, "offsets should vary");
  const [x] = scope(() => ds.randomWindowBatch(new TorchGenerator(7), 64).map((t) => t.toArray()));
  assert.deepEqual(x, windows(ds, offsets)[0]);
});

Deno.test({
  name:
    "loadCharCorpus() reads fortunes like the peer: 43 files, 2576674 bytes, same names and bytes as Python",
  ignore: !hasPython,
  async fn() {
    const corpus = loadCharCorpus(REAL_DIR);
    const peer = await python<{ names: string[]; sha256: string; size: number }>(
      `
import hashlib, json, os, sys
d = sys.argv[1]
names = sorted(n for n in os.listdir(d) if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(d, n)))
raw = b"".join(open(os.path.join(d, n), "rb").read() for n in names)
print(json.dumps({"names": names, "sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}))
`,
      REAL_DIR,
    );
    assert.deepEqual(corpus.names, peer.names);
    const all = new Uint8Array(corpus.train.length + corpus.val.length);
    all.set(corpus.train);
    all.set(corpus.val, corpus.train.length);
    assert.equal(createHash("sha256").update(all).digest("hex"), peer.sha256);
    assert.equal(corpus.train.length, Math.floor(0.9 * peer.size));
    if (REAL_DIR === FORTUNES_DIR) {
      assert.deepEqual([corpus.files, all.length], [PEER_CORPUS_FILES, PEER_CORPUS_BYTES]);
    }
  },
});

Deno.test({
  name:
    "CharWindows.randomWindowBatch() matches torch's get_batch (seed 1000): offsets and windows",
  ignore: !hasTorch,
  async fn() {
    const peer = await python<{ offsets: number[][]; x: number[]; y: number[] }>(
      `
import json, os, sys, torch
d, BLOCK = sys.argv[1], ${CHAR_BLOCK}
names = sorted(n for n in os.listdir(d) if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(d, n)))
raw = b"".join(open(os.path.join(d, n), "rb").read() for n in names)
data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.long)
train = data[:int(0.9 * len(data))]
gen = torch.Generator().manual_seed(1000)
offsets = [torch.randint(len(train) - (BLOCK + 1), (16,), generator=gen).tolist() for _ in range(3)]
ix = torch.randint(len(train) - (BLOCK + 1), (16,), generator=gen)
w = torch.stack([train[i:i + BLOCK + 1] for i in ix.tolist()])
print(json.dumps({"offsets": offsets, "x": w[:, :-1].flatten().tolist(), "y": w[:, 1:].flatten().tolist()}))
`,
      REAL_DIR,
    );
    const ds = new CharWindows(loadCharCorpus(REAL_DIR).train);
    const gen = new TorchGenerator(1000);
    const mine = [0, 1, 2].map(() => [...ds.randomOffsets(gen, 16)]);
    assert.deepEqual(mine, peer.offsets);
    const [x, y] = scope(() => ds.randomWindowBatch(gen, 16).map((t) => [...t.toArray()]));
    assert.deepEqual(x, peer.x);
    assert.deepEqual(y, peer.y);
  },
});
