/**
 * Tests of io/pickle.ts and the torch allow-list: pickles written by CPython
 * (protocols 2, 4, 5) decode to the expected values, forbidden globals are
 * refused before anything is called, and every malformed stream fails with
 * an Error naming the byte offset.
 */
import assert from "node:assert/strict";
import { PyCallable, unpickle, type UnpickleOptions } from "../../io/pickle.ts";
import { torchGlobals } from "../../io/torch_globals.ts";
import { TensorAssembler } from "../../io/torch_tensor.ts";
import { pickleOf, PickleWriter } from "./_pickle_writer.ts";

const hex = (s: string) => new Uint8Array(s.match(/../g)!.map((h) => parseInt(h, 16)));
const refuseAll: UnpickleOptions["findGlobal"] = (m, n) => {
  throw new Error(`unexpected global ${m}.${n}`);
};
const load = (bytes: Uint8Array, options: Partial<UnpickleOptions> = {}) =>
  unpickle(bytes, { source: "t.pkl", findGlobal: refuseAll, ...options }).value;

function assertInvalid(
  bytes: Uint8Array,
  pattern: RegExp,
  options: Partial<UnpickleOptions> = {},
): void {
  assert.throws(() => load(bytes, options), (e: unknown) => {
    assert.ok(e instanceof Error && e.constructor === Error, `expected a plain Error, got ${e}`);
    assert.match(e.message, /^Invalid pickle in t\.pkl at byte \d+ /);
    assert.match(e.message, pattern);
    return true;
  });
}

// pickle.dumps(obj, protocol=p) by CPython 3.11 for the object described in expectedFor() below.
const CPYTHON: Record<number, string> = {
  2: "80027d7100285804000000696e747371015d7102284b004bff4d00014dffff4a000001004affffffff4a000000804affffff7f8a050000" +
    "0080008a07000000000000208a0800000000000000808a09050000000000000001655806000000666c6f617473710328473fb999999999" +
    "999a478000000000000000473e45798ee2308c3a477ff000000000000047400800000000000074710458040000007465787471055d7106" +
    "28580000000071075802000000c3a971085809000000e697a5e69cace8aa9e71095804000000f09f9880710a6558060000007475706c65" +
    "73710b28294b0185710c4b014b0286710d4b014b024b0387710e284b014b024b034b0474710f7471104b034e4b0158010000006b711186" +
    "711288895801000000667113580600000073686172656471145d7115285d7116284b014b0265681665752e",
  4: "80049518010000000000007d94288c04696e7473945d94284b004bff4d00014dffff4a000001004affffffff4a000000804affffff7f8a" +
    "0500000080008a07000000000000208a0800000000000000808a09050000000000000001658c06666c6f6174739428473fb99999999999" +
    "9a478000000000000000473e45798ee2308c3a477ff000000000000047400800000000000074948c0474657874945d94288c00948c02c3" +
    "a9948c09e697a5e69cace8aa9e948c04f09f988094658c067475706c65739428294b0185944b014b0286944b014b024b038794284b014b" +
    "024b034b04749474944b034e4b018c016b94869488898c0166948c06736861726564945d94285d94284b014b02656816658c0562797465" +
    "73945d9428430094430200ff9465752e",
  5: "80059530010000000000007d94288c04696e7473945d94284b004bff4d00014dffff4a000001004affffffff4a000000804affffff7f8a" +
    "0500000080008a07000000000000208a0800000000000000808a09050000000000000001658c06666c6f6174739428473fb99999999999" +
    "9a478000000000000000473e45798ee2308c3a477ff000000000000047400800000000000074948c0474657874945d94288c00948c02c3" +
    "a9948c09e697a5e69cace8aa9e948c04f09f988094658c067475706c65739428294b0185944b014b0286944b014b024b038794284b014b" +
    "024b034b04749474944b034e4b018c016b94869488898c0166948c06736861726564945d94285d94284b014b02656816658c0562797465" +
    "73945d9428430094430200ff94658c0962797465617272617994960200000000000000626194752e",
};

function expectedFor(protocol: number): Map<unknown, unknown> {
  const shared = [1, 2];
  const m = new Map<unknown, unknown>([
    ["ints", [
      0,
      255,
      256,
      65535,
      65536,
      -1,
      -(2 ** 31),
      2 ** 31 - 1,
      2 ** 31,
      2n ** 53n,
      -(2n ** 63n),
      2n ** 64n + 5n,
    ]],
    ["floats", [0.1, -0, 1e-8, Infinity, 3]],
    ["text", ["", "é", "日本語", "\u{1F600}"]],
    ["tuples", [[], [1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]],
    [3, null],
    [[1, "k"], true],
    [false, "f"],
    ["shared", [shared, shared]],
  ]);
  if (protocol >= 3) m.set("bytes", [new Uint8Array(0), new Uint8Array([0, 255])]);
  if (protocol >= 5) m.set("bytearray", new Uint8Array([0x62, 0x61]));
  return m;
}

Deno.test("unpickle() decodes CPython's protocol 2, 4 and 5 pickles exactly", () => {
  for (const protocol of [2, 4, 5]) {
    const bytes = hex(CPYTHON[protocol]!);
    const { value, end } = unpickle(bytes, { source: "t.pkl", findGlobal: refuseAll });
    assert.equal(end, bytes.length);
    assert.deepStrictEqual(value, expectedFor(protocol), `protocol ${protocol}`);
    const v = value as Map<unknown, unknown>;
    assert.ok(
      Object.isFrozen(v.get("floats")) && !Object.isFrozen(v.get("ints")),
      "tuples are frozen, lists are not",
    );
    const shared = v.get("shared") as unknown[];
    assert.equal(shared[0], shared[1], "the memo must return the same object, not a copy");
  }
});

Deno.test("unpickle() reads less common opcodes: LONG4, BINUNICODE8, BINSTRING, DICT, LIST, POP, DUP, LONG_BINPUT", () => {
  const w = new PickleWriter().proto(2).mark();
  w.raw(0x8b).u32(9).raw(0, 0, 0, 0, 0, 0, 0, 0, 0x80); // LONG4: -2^71
  w.raw(0x8d).u64(2n).utf8("hi"); // BINUNICODE8
  w.raw(0x54).u32(3).utf8("abc"); // BINSTRING
  w.raw(0x55, 1).utf8("z"); // SHORT_BINSTRING
  w.raw(0x8e).u64(1n).raw(9); // BINBYTES8
  w.raw(0x43, 1, 8); // SHORT_BINBYTES
  w.mark().str("k").int(1).raw(0x64); // DICT
  w.mark().int(5).int(6).raw(0x6c); // LIST
  w.int(99).raw(0x30); // POP drops 99
  w.mark().int(7).raw(0x31); // POP_MARK drops the mark and 7
  w.str("d").raw(0x32); // DUP
  w.binput(300).raw(0x30).binget(300); // LONG_BINPUT / LONG_BINGET
  w.raw(0x6c).stop(); // LIST of everything since the first MARK
  assert.deepStrictEqual(load(w.bytes()), [
    -(2n ** 71n),
    "hi",
    "abc",
    "z",
    new Uint8Array([9]),
    new Uint8Array([8]),
    new Map([["k", 1]]),
    [5, 6],
    "d",
    "d",
  ]);
});

Deno.test("unpickle() keeps memo indices up to 2^32-1 without allocating for them", () => {
  // NONE, LONG_BINPUT 0xffffffff, POP, LONG_BINGET 0xffffffff, STOP: the memo is a map, not an array.
  const bytes = new Uint8Array([
    0x4e,
    0x72,
    0xff,
    0xff,
    0xff,
    0xff,
    0x30,
    0x6a,
    0xff,
    0xff,
    0xff,
    0xff,
    0x2e,
  ]);
  assert.equal(load(bytes), null);
});

Deno.test("unpickle() returns the end offset, so consecutive pickles can be read", () => {
  const first = pickleOf("one");
  const bytes = new Uint8Array([...first, ...pickleOf([2])]);
  const a = unpickle(bytes, { findGlobal: refuseAll });
  const b = unpickle(bytes, { findGlobal: refuseAll, start: a.end });
  assert.deepStrictEqual([a.value, a.end, b.value, b.end], [
    "one",
    first.length,
    [2],
    bytes.length,
  ]);
});

Deno.test("unpickle() refuses a forbidden global before anything is called", () => {
  let called = 0;
  const probe = new PyCallable("probe", () => called++);
  const assembler = new TensorAssembler("evil.pt", 1 << 20);
  const allowList = torchGlobals(assembler, "evil.pt");
  const options = { source: "evil.pt", findGlobal: allowList, persistentLoad: () => probe };
  // GLOBAL 'os\nsystem\n', the argument tuple, REDUCE: what a malicious torch.save payload looks like.
  const evil = new PickleWriter().proto(2).global("os", "system").str("echo pwned").raw(0x85)
    .reduce().stop().bytes();
  assert.throws(
    () => unpickle(evil, options),
    (e: unknown) => {
      assert.ok(e instanceof Error);
      assert.equal(
        e.message,
        'Forbidden global "os.system" in evil.pt: only state dicts and optimizer states can be loaded',
      );
      return true;
    },
  );
  const stacked = new PickleWriter().proto(4).str("builtins").str("eval").raw(0x93).str("1").raw(
    0x85,
  ).reduce().stop().bytes();
  assert.throws(
    () => unpickle(stacked, options),
    /^Error: Forbidden global "builtins.eval" in evil.pt/,
  );
  // Control characters in a refused name are shown escaped, never raw.
  const odd = new PickleWriter().proto(2).global("os", "sys\ttem\x1b[2J").stop().bytes();
  assert.throws(
    () => unpickle(odd, options),
    /^Error: Forbidden global "os\.sys\\x09tem\\x1b\[2J" in evil\.pt/,
  );
  assert.equal(called, 0);
});

Deno.test("unpickle() names unknown and refused opcodes with their byte offset", () => {
  assertInvalid(new Uint8Array([0x80, 2, 0xff]), /at byte 2 \(0xff\): unknown opcode 0xff/);
  assertInvalid(
    new Uint8Array([0x80, 2, 0x4e, 0x29, 0x81]),
    /at byte 4 \(NEWOBJ\): unsupported opcode: object construction is not allowed/,
  );
  assertInvalid(
    new Uint8Array([0x80, 4, 0x8f]),
    /\(EMPTY_SET\): unsupported opcode: sets are not supported/,
  );
  assertInvalid(
    new Uint8Array([0x82, 1]),
    /\(EXT1\): unsupported opcode: extension registry codes/,
  );
  assertInvalid(
    new TextEncoder().encode("I01\n."),
    /at byte 0 \(INT\): unsupported opcode: text-mode \(protocol 0\/1\) opcodes/,
  );
  assertInvalid(new Uint8Array([0x80, 6]), /\(PROTO\): unsupported pickle protocol 6/);
});

Deno.test("unpickle() fails cleanly on truncated and inconsistent streams", () => {
  const cases: [number[], RegExp][] = [
    [[0x80, 2], /\(end of input\): truncated: no STOP opcode/],
    [[0x58, 16, 0, 0, 0, 0x61], /at byte 0 \(BINUNICODE\): truncated: needs 16 more bytes, 1 left/],
    [
      [0x8d, 0, 0, 0, 0, 0, 0, 0, 0x80],
      /\(BINUNICODE8\): length 9223372036854775808 exceeds the 0 bytes left/,
    ],
    [[0x95, 100, 0, 0, 0, 0, 0, 0, 0, 0x2e], /\(FRAME\): length 100 exceeds the 1 bytes left/],
    [[0x54, 0xff, 0xff, 0xff, 0xff], /\(BINSTRING\): negative string length -1/],
    [[0x8c, 1, 0xff, 0x2e], /\(SHORT_BINUNICODE\): string is not valid UTF-8/],
    [[0x63, 0x61, 0x62], /\(GLOBAL\): truncated: unterminated line/],
    [[0x2e], /at byte 0 \(STOP\): stack underflow/],
    [[0x68, 5, 0x2e], /\(BINGET\): memo key 5 was never stored/],
    [[0x74, 0x2e], /\(TUPLE\): no MARK to pop to/],
    [[0x7d, 0x4e, 0x61], /\(APPEND\): cannot append to a dict/],
    [[0x29, 0x4e, 0x61], /\(APPEND\): cannot append to a tuple/],
    [[0x5d, 0x4e, 0x4e, 0x73], /\(SETITEM\): cannot set an item on a list/],
    [[0x7d, 0x28, 0x4e, 0x75], /\(SETITEMS\): odd number of items \(1\)/],
    [[0x7d, 0x5d, 0x4e, 0x73], /\(SETITEM\): a list cannot be a dict key \(unhashable\)/],
    [
      [0x58, 1, 0, 0, 0, 0x61, 0x29, 0x52],
      /\(REDUCE\): only allowed functions can be called, not a str/,
    ],
    [[0x4e, 0x4e, 0x62], /\(BUILD\): setting the state of None is not allowed/],
    [[0x4e, 0x51], /\(BINPERSID\): persistent ids are not allowed in this pickle/],
    [[0x93], /\(STACK_GLOBAL\): stack underflow/],
    [[0x4b, 1, 0x4b, 2, 0x93], /module and name must be strings, got an int and an int/],
  ];
  for (const [bytes, pattern] of cases) assertInvalid(new Uint8Array(bytes), pattern);
  const fn = new PyCallable("f", () => 1);
  assertInvalid(
    new Uint8Array([0x63, 0x61, 0x0a, 0x62, 0x0a, 0x5d, 0x52]),
    /\(REDUCE\): arguments must be a tuple, got a list/,
    {
      findGlobal: () => fn,
    },
  );
});

Deno.test("unpickle() builds self-referential lists without looping", () => {
  // EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, STOP: a list that contains itself.
  const v = load(new Uint8Array([0x5d, 0x71, 0, 0x68, 0, 0x61, 0x2e])) as unknown[];
  assert.equal(v.length, 1);
  assert.equal(v[0], v);
});
