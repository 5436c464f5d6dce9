/**
 * Tests of io/safetensors.ts: byte-identical round trips of the PyTorch
 * fixtures, the reference library's own byte vectors, one test per kind of
 * malformed file, file I/O and the typed-array views.
 */
import assert from "node:assert/strict";
import {
  asBigInt64Array,
  asFloat32Array,
  parseSafetensors,
  readSafetensorsFile,
  serializeSafetensors,
  type StTensor,
  writeSafetensorsFile,
} from "../../io/safetensors.ts";
import {
  asFloat64Array,
  asInt32Array,
  asUint16Array,
  tensorFromArray,
} from "../../io/st_tensor.ts";
import { fixtureDir, readFixture } from "./_fixtures.ts";

/** A file made of a header length, `header` text, and `data` (bytes or a zero-filled length). */
function fileOf(header: string, data: Uint8Array | number = 0, lengthField?: bigint): Uint8Array {
  const json = new TextEncoder().encode(header);
  const body = typeof data === "number" ? new Uint8Array(data) : data;
  const out = new Uint8Array(8 + json.length + body.length);
  new DataView(out.buffer).setBigUint64(0, lengthField ?? BigInt(json.length), true);
  out.set(json, 8);
  out.set(body, 8 + json.length);
  return out;
}

function assertInvalid(bytes: Uint8Array, pattern: RegExp): void {
  assert.throws(() => parseSafetensors(bytes, "bad.safetensors"), (e: unknown) => {
    assert.ok(e instanceof Error && e.constructor === Error, `expected a plain Error, got ${e}`);
    assert.match(e.message, /^Invalid safetensors file bad\.safetensors: /);
    assert.match(e.message, pattern);
    return true;
  });
}

const sameBytes = (a: Uint8Array, b: Uint8Array) =>
  a.length === b.length && a.every((x, i) => x === b[i]);

Deno.test("serializeSafetensors() reproduces every fixture file byte for byte", () => {
  const names = [...Deno.readDirSync(fixtureDir())].map((e) => e.name).filter((n) =>
    n.endsWith(".safetensors")
  );
  assert.ok(
    names.includes("ckpt_full.safetensors") && names.includes("toy_mlp_data.safetensors"),
    `fixtures: ${names}`,
  );
  for (const name of names) {
    const bytes = readFixture(name);
    const { tensors, metadata } = parseSafetensors(bytes, name);
    assert.ok(
      sameBytes(serializeSafetensors(tensors, metadata), bytes),
      `${name} did not round-trip`,
    );
  }
});

Deno.test("parseSafetensors() returns aligned views with the fixture's dtypes, shapes and values", () => {
  const bytes = readFixture("gpt_mini_io.safetensors");
  const { tensors } = parseSafetensors(bytes, "gpt_mini_io.safetensors");
  assert.deepEqual([...tensors.keys()], ["x", "y", "logits"]);
  const x = tensors.get("x")!;
  const y = tensors.get("y")!;
  assert.equal(x.dtype, "I64");
  assert.deepEqual(x.shape, [4, 64]);
  assert.deepEqual(tensors.get("logits")!.shape, [4, 64, 256]);
  assert.equal(x.data.buffer, bytes.buffer, "tensor data must be a view, not a copy");
  const xs = asBigInt64Array(x);
  const ys = asBigInt64Array(y);
  assert.equal(xs.buffer, bytes.buffer, "an aligned I64 tensor must be viewed in place");
  // x = tokens[:, :64] and y = tokens[:, 1:], so y is x shifted by one token.
  for (let b = 0; b < 4; b++) {
    for (let t = 0; t < 63; t++) assert.equal(ys[b * 64 + t], xs[b * 64 + t + 1]);
  }
  assert.ok(xs.every((v) => v >= 0n && v < 256n));
});

Deno.test("parseSafetensors() reads ckpt_full's metadata and 0-dim step tensors", () => {
  const { tensors, metadata } = parseSafetensors(
    readFixture("ckpt_full.safetensors"),
    "ckpt_full.safetensors",
  );
  assert.equal(metadata.epoch, "3");
  const groups = JSON.parse(metadata.param_groups!);
  assert.deepEqual(groups[0].betas, [0.9, 0.999]);
  assert.deepEqual(groups[0].params, [0, 1, 2, 3]);
  for (let i = 0; i < 4; i++) {
    const step = tensors.get(`optimizer_state_dict.state.${i}.step`)!;
    assert.deepEqual(step.shape, []);
    assert.deepEqual([...asFloat32Array(step)], [3]);
  }
});

Deno.test("serializeSafetensors() matches the reference library's byte vectors", () => {
  // From huggingface/safetensors tensor.rs test_serialization: "attn.0", F32 [1,2,3] holding 0..5.
  const attn = tensorFromArray(new Float32Array([0, 1, 2, 3, 4, 5]), [1, 2, 3]);
  const expected = [
    64,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    123,
    34,
    97,
    116,
    116,
    110,
    46,
    48,
    34,
    58,
    123,
    34,
    100,
    116,
    121,
    112,
    101,
    34,
    58,
    34,
    70,
    51,
    50,
    34,
    44,
    34,
    115,
    104,
    97,
    112,
    101,
    34,
    58,
    91,
    49,
    44,
    50,
    44,
    51,
    93,
    44,
    34,
    100,
    97,
    116,
    97,
    95,
    111,
    102,
    102,
    115,
    101,
    116,
    115,
    34,
    58,
    91,
    48,
    44,
    50,
    52,
    93,
    125,
    125,
    0,
    0,
    0,
    0,
    0,
    0,
    128,
    63,
    0,
    0,
    0,
    64,
    0,
    0,
    64,
    64,
    0,
    0,
    128,
    64,
    0,
    0,
    160,
    64,
  ];
  assert.deepEqual([...serializeSafetensors(new Map([["attn.0", attn]]))], expected);
  // test_empty: no tensors is "{}" padded to 8; with metadata {"framework": "pt"}, 40 header bytes.
  assert.deepEqual([...serializeSafetensors([])], [
    8,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    123,
    125,
    32,
    32,
    32,
    32,
    32,
    32,
  ]);
  const withMeta = serializeSafetensors([], { framework: "pt" });
  assert.equal(
    new TextDecoder().decode(withMeta.subarray(8)),
    '{"__metadata__":{"framework":"pt"}}     ',
  );
  assert.equal(withMeta[0], 40);
});

Deno.test("serializeSafetensors() orders by dtype (largest first), then name, keeping every tensor aligned", () => {
  const t = (dtype: StTensor["dtype"], n: number, bytesPer: number): StTensor => ({
    dtype,
    shape: [n],
    data: new Uint8Array(n * bytesPer).fill(n),
  });
  const input = new Map<string, StTensor>([
    ["b_u8", t("U8", 3, 1)],
    ["z_f64", t("F64", 1, 8)],
    ["a_f16", t("F16", 1, 2)],
    ["a_bf16", t("BF16", 1, 2)],
    ["a_i64", t("I64", 2, 8)],
    ["m_i32", t("I32", 1, 4)],
    ["a_bool", t("BOOL", 1, 1)],
    ["é_f32", t("F32", 1, 4)],
    ["Z_f32", t("F32", 1, 4)],
    ["\u{1F600}", t("F32", 1, 4)], // code-point order puts this after U+FFFD; UTF-16 order would not
    ["\uFFFD", t("F32", 1, 4)],
  ]);
  const bytes = serializeSafetensors(input, { note: "x" });
  const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  assert.equal((8 + n) % 8, 0);
  const header = new TextDecoder().decode(bytes.subarray(8, 8 + n));
  assert.ok(header.startsWith('{"__metadata__":{"note":"x"},'), header);
  const parsed = parseSafetensors(bytes);
  assert.deepEqual([...parsed.tensors.keys()], [
    "a_i64",
    "z_f64",
    "Z_f32",
    "é_f32",
    "\uFFFD",
    "\u{1F600}",
    "m_i32",
    "a_bf16",
    "a_f16",
    "b_u8",
    "a_bool",
  ]);
  for (const [name, tensor] of parsed.tensors) {
    const size = tensor.data.byteLength / tensor.shape[0]!;
    assert.equal(tensor.data.byteOffset % size, 0, `${name} is misaligned`);
    assert.ok(sameBytes(tensor.data, input.get(name)!.data), `${name} bytes differ`);
  }
});

Deno.test("parseSafetensors() accepts 0-dim and zero-size tensors and null metadata", () => {
  const { tensors, metadata } = parseSafetensors(fileOf(
    '{"__metadata__":null,"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},' +
      '"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}',
    new Uint8Array([7, 0, 0, 0]),
  ));
  assert.deepEqual(metadata, {});
  assert.equal(tensors.get("e")!.data.byteLength, 0);
  assert.deepEqual([...asInt32Array(tensors.get("s")!)], [7]);
});

Deno.test("parseSafetensors() rejects truncated files and absurd header lengths", () => {
  assertInvalid(new Uint8Array(7), /7 bytes long, shorter than the 8-byte header length field/);
  assertInvalid(
    fileOf("{}", 0, 100_000_001n),
    /header length 100000001 exceeds the 100000000-byte limit/,
  );
  assertInvalid(fileOf("{}", 0, 2n ** 64n - 1n), /exceeds the 100000000-byte limit/);
  assertInvalid(fileOf("{}", 0, 40n), /header length 40 runs past the end of the 10-byte file/);
  const ok = serializeSafetensors(
    new Map([["w", tensorFromArray(new Float32Array(4), [4])]]),
  );
  assertInvalid(
    ok.subarray(0, ok.length - 1),
    /runs past the 15-byte data section \(truncated file\?\)/,
  );
});

Deno.test("parseSafetensors() rejects headers that are not UTF-8, not JSON or not an object", () => {
  assertInvalid(fileOf("{}", 0).map((b, i) => (i === 9 ? 0xff : b)), /header is not valid UTF-8/);
  assertInvalid(fileOf('{"a":'), /header is not valid JSON: unexpected end of input/);
  assertInvalid(fileOf("\uFEFF{}"), /header is not valid JSON: unexpected character/);
  assertInvalid(fileOf("[1, 2]"), /header is an array, expected a JSON object/);
  assertInvalid(fileOf("{} x"), /unexpected text after the JSON value/);
  assertInvalid(fileOf("[".repeat(100_000)), /nesting deeper than 64 levels/);
  assertInvalid(fileOf('{"a":"\\ud800"}'), /unpaired surrogate/);
});

Deno.test("parseSafetensors() rejects bad tensor entries: dtype, shape, offsets, duplicates", () => {
  const entry = (name: string, body: string) => fileOf(`{"${name}":${body}}`, 16);
  assertInvalid(
    entry("w", '{"dtype":"F17","shape":[4],"data_offsets":[0,16]}'),
    /tensor "w" has unknown dtype "F17"/,
  );
  assertInvalid(
    entry("w", '{"dtype":"constructor","shape":[4],"data_offsets":[0,16]}'),
    /unknown dtype "constructor"/,
  );
  assertInvalid(entry("w", '{"dtype":4,"shape":[4],"data_offsets":[0,16]}'), /unknown dtype 4/);
  assertInvalid(entry("w", '{"shape":[4],"data_offsets":[0,16]}'), /tensor "w" has no "dtype"/);
  assertInvalid(
    entry("w", '"F32"'),
    /tensor "w" is a string, expected \{dtype, shape, data_offsets\}/,
  );
  for (const shape of ["[-1]", "[1.5]", '"4"', "[[4]]", "[9007199254740992]", "4", "[1e400]"]) {
    assertInvalid(
      entry("w", `{"dtype":"F32","shape":${shape},"data_offsets":[0,16]}`),
      /tensor "w" shape .* is not a list of non-negative integers/,
    );
  }
  for (const offsets of ["[0]", "[0,16,32]", '[0,"16"]', "[0,16.5]", "[-16,0]", "null"]) {
    assertInvalid(
      entry("w", `{"dtype":"F32","shape":[4],"data_offsets":${offsets}}`),
      /data_offsets .* is not \[begin, end\] with non-negative integers/,
    );
  }
  assertInvalid(
    entry("w", '{"dtype":"F32","shape":[4],"data_offsets":[16,0]}'),
    /data_offsets \[16, 0\] end before they begin/,
  );
  assertInvalid(
    fileOf(
      '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
      2,
    ),
    /duplicate key "w"/,
  );
});

Deno.test("parseSafetensors() rejects layouts with overruns, overlaps, gaps, size mismatches or trailing bytes", () => {
  const two = (a: string, b: string, data: number) =>
    fileOf(
      `{"a":{"dtype":"F32","shape":[2],"data_offsets":${a}},"b":{"dtype":"F32","shape":[2],"data_offsets":${b}}}`,
      data,
    );
  assertInvalid(
    two("[0,8]", "[8,16]", 12),
    /tensor "b" \(data_offsets \[8, 16\]\) runs past the 12-byte data section/,
  );
  assertInvalid(
    two("[0,8]", "[4,12]", 12),
    /tensor "b" \(data_offsets \[4, 12\]\) overlaps the previous tensor, which ends at 8/,
  );
  assertInvalid(
    two("[0,8]", "[12,20]", 20),
    /leaves a gap of 4 bytes after offset 8; the format forbids holes/,
  );
  assertInvalid(two("[0,8]", "[8,16]", 20), /4 bytes follow the last tensor \(data ends at 16\)/);
  assertInvalid(
    fileOf('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', 8),
    /tensor "a" \(data_offsets \[0, 8\]\) holds 8 bytes but F32 × \[3\] needs 12/,
  );
  // 2^52 × 2^52 elements would overflow 64-bit arithmetic; the check is exact.
  assertInvalid(
    fileOf(
      '{"a":{"dtype":"F64","shape":[4503599627370496,4503599627370496],"data_offsets":[0,0]}}',
    ),
    /holds 0 bytes but F64 × \[4503599627370496,4503599627370496\] needs 162259276829213363391578010288128/,
  );
});

Deno.test("parseSafetensors() rejects non-string __metadata__", () => {
  assertInvalid(
    fileOf('{"__metadata__":{"epoch":3}}'),
    /__metadata__ value for key "epoch" is a number, expected a string/,
  );
  assertInvalid(
    fileOf('{"__metadata__":["a"]}'),
    /__metadata__ is an array, expected an object of strings/,
  );
  const { metadata } = parseSafetensors(fileOf('{"__metadata__":{"__proto__":"p","0":"zero"}}'));
  assert.equal(
    Object.getPrototypeOf(metadata),
    Object.prototype,
    "a __proto__ key must not replace the prototype",
  );
  assert.equal(Object.getOwnPropertyDescriptor(metadata, "__proto__")?.value, "p");
});

Deno.test("serializeSafetensors() refuses inconsistent tensors and reserved or duplicate names", () => {
  const good = tensorFromArray(new Float32Array(2), [2]);
  assert.throws(
    () => serializeSafetensors(new Map([["w", { ...good, shape: [3] }]])),
    /Tensor "w" has 8 bytes but F32 × \[3\] needs 12/,
  );
  assert.throws(
    () => serializeSafetensors([["w", { ...good, dtype: "F17" as "F32" }]]),
    /Tensor "w" has unknown dtype "F17"/,
  );
  assert.throws(
    () => serializeSafetensors([["w", { ...good, shape: [-2] }]]),
    /shape \[-2\] is not a list of non-negative integers/,
  );
  assert.throws(() => serializeSafetensors([["__metadata__", good]]), /"__metadata__" is reserved/);
  assert.throws(
    () => serializeSafetensors([["w", good], ["w", good]]),
    /Duplicate tensor name "w"/,
  );
  assert.throws(
    () => serializeSafetensors([], { epoch: 3 as unknown as string }),
    /Metadata value for "epoch" is a number/,
  );
});

Deno.test("writeSafetensorsFile() and readSafetensorsFile() round-trip; read errors name the path", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dtrain_st_" });
  try {
    const path = `${dir}/w.safetensors`;
    const w = tensorFromArray(new Float32Array([1, -2, 3.5, 1e-8]), [2, 2]);
    const ids = tensorFromArray(new BigInt64Array([-1n, 0n, 2n ** 62n]), [3]);
    await writeSafetensorsFile(path, new Map([["w", w], ["ids", ids]]), { step: "7" });
    const { tensors, metadata } = readSafetensorsFile(path);
    assert.deepEqual(metadata, { step: "7" });
    assert.deepEqual([...asFloat32Array(tensors.get("w")!)], [1, -2, 3.5, Math.fround(1e-8)]);
    assert.deepEqual([...asBigInt64Array(tensors.get("ids")!)], [-1n, 0n, 2n ** 62n]);
    assert.ok(
      sameBytes(
        Deno.readFileSync(path),
        serializeSafetensors([["w", w], ["ids", ids]], { step: "7" }),
      ),
    );
    Deno.writeFileSync(path, new Uint8Array([1, 2, 3]));
    assert.throws(
      () => readSafetensorsFile(path),
      new RegExp(`^Error: Invalid safetensors file ${path}: it is 3 bytes long`),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("tensorFromArray() infers the dtype from the array type unless told otherwise", () => {
  assert.equal(tensorFromArray(new BigInt64Array(2), [2]).dtype, "I64");
  assert.deepEqual([...asFloat64Array(tensorFromArray(new Float64Array([1.5, -0.25]), [2]))], [
    1.5,
    -0.25,
  ]);
  assert.equal(tensorFromArray(new Int8Array(6), [2, 3]).dtype, "I8");
  const bf16 = tensorFromArray(new Uint16Array([0x3f80, 0xc000]), [2], { dtype: "BF16" });
  assert.equal(bf16.dtype, "BF16");
  assert.deepEqual([...asUint16Array(bf16)], [0x3f80, 0xc000]);
  assert.throws(
    () => tensorFromArray(new DataView(new ArrayBuffer(4)), [1]),
    /Cannot tell the dtype of a DataView: pass options.dtype/,
  );
  assert.throws(
    () => tensorFromArray(new Float32Array(2), [-2]),
    /dimensions must be non-negative integers/,
  );
});

Deno.test("asFloat32Array() views aligned data in place, copies misaligned data, and checks the dtype", () => {
  const backing = new Uint8Array(13);
  new DataView(backing.buffer).setFloat32(1, 1.5, true);
  new DataView(backing.buffer).setFloat32(5, -2, true);
  new DataView(backing.buffer).setFloat32(9, 4, true);
  const misaligned: StTensor = { dtype: "F32", shape: [3], data: backing.subarray(1) };
  const copy = asFloat32Array(misaligned);
  assert.deepEqual([...copy], [1.5, -2, 4]);
  assert.notEqual(copy.buffer, backing.buffer);
  const aligned = tensorFromArray(new Float32Array([5, 6]), [2]);
  assert.equal(asFloat32Array(aligned).buffer, aligned.data.buffer);
  assert.throws(
    () => asBigInt64Array(aligned),
    /Cannot view a tensor of dtype F32 as BigInt64Array: expected dtype I64/,
  );
  assert.throws(
    () => tensorFromArray(new Float32Array(2), [3]),
    /from 8 bytes: expected 12/,
  );
});
