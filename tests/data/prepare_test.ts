/**
 * GPT-2's tokenizer (known ids, the separator, a round trip on a real text)
 * and `dtrain prepare`: the 90/10 split by bytes, separators between
 * documents, chunked encoding equal to encoding whole (fuzzed whitespace),
 * bytes, an input far larger than the heap allowed, and the command line
 * (exit 2 for a bad one, quiet without a terminal).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { TokenStream } from "../../data/token_file.ts";
import { bytesTokenizer, GPT2_EOT, gpt2Tokenizer } from "../../data/tokenizer.ts";
import { lastSafeCut, prepareTokens } from "../../data/prepare_tokens.ts";
import { Tiktoken } from "js-tiktoken/lite";
import gpt2Ranks from "js-tiktoken/ranks/gpt2";

const REAL_TEXT = new URL("../../docs/DESIGN.md", import.meta.url);

function readIds(path: string): number[] {
  using s = TokenStream.open(path);
  return [...s.read(0, s.length)];
}

function tmp(): string {
  return Deno.makeTempDirSync({ prefix: "dtrain-prepare-" });
}

Deno.test("gpt2: known ids, <|endoftext|> = 50256, a round trip on a real text", async () => {
  const t = await gpt2Tokenizer();
  assert.deepEqual(t.encode("hello world"), [31373, 995]);
  assert.deepEqual(t.encode("<|endoftext|>"), [GPT2_EOT]);
  assert.equal(t.decode([GPT2_EOT]), "<|endoftext|>");
  assert.deepEqual(t.encode(" the"), [262]);
  const text = Deno.readTextFileSync(REAL_TEXT) + " naïve café — 日本語 🙂";
  const ids = t.encode(text);
  assert.ok(ids.length > 1000 && ids.length < text.length, `${ids.length} ids`);
  assert.ok(ids.every((i) => i >= 0 && i < 50257));
  assert.equal(t.decode(ids), text);
  const b = bytesTokenizer();
  assert.deepEqual(b.encode("hé"), [104, 195, 169]);
  assert.equal(b.decode(b.encode(text)), text);
});

Deno.test("gpt2's piece cache gives the library's own ids, separators and repeats included", async () => {
  const library = new Tiktoken(gpt2Ranks);
  const t = await gpt2Tokenizer();
  const real = Deno.readTextFileSync(REAL_TEXT);
  let s = 99;
  const next = () => (s = (s * 1103515245 + 12345) & 0x7fffffff);
  const pieces = [
    " the",
    "The",
    "'s",
    "'ll",
    " ",
    "   ",
    "\n",
    "\n\n",
    "\t",
    "42",
    " 7",
    "!!",
    "é",
    "🙂",
    "<|endoftext|>",
  ];
  const texts = [
    real,
    real, // a second time: every piece cached
    "<|endoftext|>",
    "<|endoftext|><|endoftext|>a",
    "",
    ...Array.from(
      { length: 30 },
      () => Array.from({ length: 200 }, () => pieces[next() % pieces.length]).join(""),
    ),
  ];
  for (const text of texts) {
    assert.deepEqual(
      t.encode(text),
      library.encode(text, ["<|endoftext|>"], []),
      JSON.stringify(text.slice(0, 60)),
    );
  }
});

Deno.test("a safe cut leaves GPT-2's ids unchanged, on text with every kind of whitespace", async () => {
  const t = await gpt2Tokenizer();
  let s = 12345;
  const next = () => (s = (s * 1103515245 + 12345) & 0x7fffffff);
  const pieces = [
    "a",
    "b",
    "The",
    "'s",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    "1",
    "23",
    ".",
    "!?",
    "é",
    "🙂",
    "<|endoftext|>",
  ];
  for (let round = 0; round < 40; round++) {
    const text = Array.from({ length: 300 }, () => pieces[next() % pieces.length]).join("");
    const whole = t.encode(text);
    for (let k = 0; k < 5; k++) {
      const cut = lastSafeCut(text.slice(0, 20 + (next() % (text.length - 20))));
      if (cut === 0) continue;
      const apart = [...t.encode(text.slice(0, cut)), ...t.encode(text.slice(cut))];
      assert.deepEqual(apart, whole, `cut at ${cut} of ${JSON.stringify(text)}`);
    }
  }
  // and where a cut would not be safe, it is not offered: inside a word
  assert.equal(lastSafeCut("hello"), 0);
  assert.notDeepEqual([...t.encode("hel"), ...t.encode("lo")], t.encode("hello"));
});

Deno.test("prepare gpt2: 90/10 by bytes, each part encoded as a whole, read in small chunks", async () => {
  const dir = tmp();
  try {
    const text = Deno.readTextFileSync(REAL_TEXT).repeat(3);
    Deno.writeTextFileSync(join(dir, "input.txt"), text);
    const r = await prepareTokens(
      join(dir, "input.txt"),
      join(dir, "out"),
      await gpt2Tokenizer(),
      undefined,
      4096,
    );
    const bytes = new TextEncoder().encode(text);
    let cut = Math.floor(bytes.length * 0.9);
    while ((bytes[cut]! & 0xc0) === 0x80) cut++;
    const dec = new TextDecoder();
    const t = await gpt2Tokenizer();
    const train = readIds(join(dir, "out/train.bin"));
    const val = readIds(join(dir, "out/val.bin"));
    assert.deepEqual(train, t.encode(dec.decode(bytes.subarray(0, cut))));
    assert.deepEqual(val, t.encode(dec.decode(bytes.subarray(cut))));
    assert.equal(r.trainTokens, train.length);
    assert.equal(r.valTokens, val.length);
    assert.ok(!train.includes(GPT2_EOT), "one document: no separator");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("prepare gpt2: files are documents, separated by 50256; <|endoftext|> in a file ends one", async () => {
  const dir = tmp();
  try {
    Deno.mkdirSync(join(dir, "in/sub"), { recursive: true });
    Deno.writeTextFileSync(join(dir, "in/a.txt"), "hello world");
    Deno.writeTextFileSync(join(dir, "in/b.txt"), "");
    Deno.writeTextFileSync(join(dir, "in/sub/c.txt"), "one<|endoftext|>two");
    Deno.writeTextFileSync(join(dir, "in/d.txt"), "x".repeat(600));
    await prepareTokens(join(dir, "in"), join(dir, "out"), await gpt2Tokenizer());
    const t = await gpt2Tokenizer();
    // path order: a.txt, b.txt (empty: adds nothing), d.txt, sub/c.txt; 630 bytes, the split at
    // byte 567 falls inside d.txt
    const train = readIds(join(dir, "out/train.bin"));
    const val = readIds(join(dir, "out/val.bin"));
    assert.deepEqual(train, [...t.encode("hello world"), GPT2_EOT, ...t.encode("x".repeat(556))]);
    assert.deepEqual(val, [
      ...t.encode("x".repeat(44)),
      GPT2_EOT,
      ...t.encode("one"),
      GPT2_EOT,
      ...t.encode("two"),
    ]);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("prepare bytes: the input's bytes, split at 90 %", async () => {
  const dir = tmp();
  try {
    const data = new TextEncoder().encode("abcdefghij".repeat(100));
    Deno.writeFileSync(join(dir, "in.txt"), data);
    await prepareTokens(join(dir, "in.txt"), join(dir, "out"), bytesTokenizer(), undefined, 333);
    assert.deepEqual(readIds(join(dir, "out/train.bin")), [...data.subarray(0, 900)]);
    assert.deepEqual(readIds(join(dir, "out/val.bin")), [...data.subarray(900)]);
    // bytes that are not UTF-8 (Latin-1 text, binary) are kept as they are
    const binary = Uint8Array.from({ length: 777 }, (_, i) => (i * 37 + 200) & 0xff);
    Deno.writeFileSync(join(dir, "bin.dat"), binary);
    await prepareTokens(join(dir, "bin.dat"), join(dir, "b"), bytesTokenizer(), undefined, 100);
    const ids = [...readIds(join(dir, "b/train.bin")), ...readIds(join(dir, "b/val.bin"))];
    assert.deepEqual(ids, [...binary]);
    assert.equal(readIds(join(dir, "b/train.bin")).length, Math.floor(777 * 0.9));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

function cli(args: string[], env: Record<string, string> = {}) {
  const r = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--v8-flags=--max-old-space-size=48", "cli.ts", "prepare", ...args],
    env,
  }).outputSync();
  const dec = new TextDecoder();
  return { code: r.code, stdout: dec.decode(r.stdout), stderr: dec.decode(r.stderr) };
}

Deno.test("dtrain prepare: streams an input larger than the heap it may use; bad command lines exit 2", () => {
  const dir = tmp();
  try {
    // 64 MB of text as ids in one JS array would need ~512 MB; the heap is capped at 48 MB.
    const line = new TextEncoder().encode("The quick brown fox jumps over the lazy dog.\n");
    const f = Deno.openSync(join(dir, "big.txt"), { create: true, write: true });
    const block = new Uint8Array(line.length * 20000);
    for (let i = 0; i < 20000; i++) block.set(line, i * line.length);
    for (let written = 0; written < 64e6; written += block.length) f.writeSync(block);
    f.close();
    const size = Deno.statSync(join(dir, "big.txt")).size;
    const ok = cli(["--tokenizer", "bytes", join(dir, "big.txt"), join(dir, "out")]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(
      ok.stdout,
      /train\.bin \(\d+ tokens\) and .*val\.bin \(\d+ tokens\), bytes, from 1 file\(s\)/,
    );
    assert.equal(ok.stderr, "", "no progress bar when stderr is not a terminal");
    assert.equal(Deno.statSync(join(dir, "out/train.bin")).size, 2 * Math.floor(size * 0.9));
    assert.equal(Deno.statSync(join(dir, "out/val.bin")).size, 2 * (size - Math.floor(size * 0.9)));

    const quiet = cli(["--quiet", "--tokenizer", "gpt2", REAL_TEXT.pathname, join(dir, "g")]);
    assert.equal(quiet.code, 0, quiet.stderr);
    assert.equal(quiet.stdout + quiet.stderr, "");
    assert.ok(Deno.statSync(join(dir, "g/val.bin")).size > 0);

    for (
      const [args, why] of [
        [
          ["--tokenizer", "sentencepiece", "a", "b"],
          /unknown tokenizer "sentencepiece": expected gpt2 or bytes/,
        ],
        [["only-one"], /expected INPUT and DIR, got 1 argument/],
        [["--frobnicate", "a", "b"], /Unknown option '--frobnicate'/],
        [[join(dir, "missing.txt"), join(dir, "o")], /INPUT .*missing\.txt does not exist/],
      ] as const
    ) {
      const r = cli([...args]);
      assert.equal(r.code, 2, `${args}: ${r.stderr}`);
      assert.match(r.stderr, why);
    }
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("the progress line: a bar, the share, MB/s and tokens", async () => {
  const { progressLine } = await import("../../data/prepare_main.ts");
  const line = progressLine(
    { bytesRead: 5e6, totalBytes: 20e6, trainTokens: 1_200_000, valTokens: 0 },
    2,
    20,
  );
  assert.equal(line, "[#####...............]  25 % 5.0 MB of 20.0 MB, 2.5 MB/s, 1,200,000 tokens");
});
