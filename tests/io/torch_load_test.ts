/**
 * Tests of io/torch_load.ts and io/state_dict.ts: every torch.save fixture
 * (zip and legacy) equals its safetensors twin, strided and tied tensors come
 * out right, forbidden globals are refused in real .pt files, and each
 * malformed checkpoint fails with an Error naming the file.
 */
import assert from "node:assert/strict";
import { parseSafetensors } from "../../io/safetensors.ts";
import { asFloat32Array, type StTensor } from "../../io/st_tensor.ts";
import {
  flattenStateDict,
  loadTorchFile,
  readTorchFile,
  stripModulePrefix,
  toJsonValue,
  TorchTensor,
} from "../../io/torch_load.ts";
import { fixturePath, readFixture } from "./_fixtures.ts";
import {
  Global,
  orderedDictOps,
  pickleOf,
  PickleWriter,
  tensorOps,
  type TensorSpec,
  Tuple,
} from "./_pickle_writer.ts";
import { buildLegacy, buildTorchZip, buildZip } from "./_zip_writer.ts";

function assertSameTensor(actual: unknown, expected: StTensor, name: string): void {
  assert.ok(actual instanceof TorchTensor, `${name} is not a tensor`);
  assert.equal(actual.dtype, expected.dtype, `${name} dtype`);
  assert.deepEqual(actual.shape, expected.shape, `${name} shape`);
  assert.ok(
    actual.data.length === expected.data.length &&
      actual.data.every((b, i) => b === expected.data[i]),
    `${name} bytes differ`,
  );
}

/** Asserts that `loaded` holds exactly the twin's tensors under the same names, in the twin's key set. */
function assertMatchesTwin(loaded: Map<string, unknown>, twinName: string): void {
  const twin = parseSafetensors(readFixture(twinName), twinName).tensors;
  assert.deepEqual([...loaded.keys()].sort(), [...twin.keys()].sort());
  for (const [name, tensor] of twin) assertSameTensor(loaded.get(name), tensor, name);
}

const f32 = (values: number[]) => new Uint8Array(new Float32Array(values).buffer);
const floatsOf = (v: unknown) => [...asFloat32Array(v as StTensor)];

function assertInvalid(load: () => unknown, pattern: RegExp): void {
  assert.throws(load, (e: unknown) => {
    assert.ok(e instanceof Error && e.constructor === Error, `expected a plain Error, got ${e}`);
    assert.match(e.message, /x\.pt/);
    assert.match(e.message, pattern);
    return true;
  });
}

Deno.test("loadTorchFile() loads the zip and legacy state dicts equal to ckpt_state_dict.safetensors", () => {
  for (const name of ["ckpt_state_dict.pt", "ckpt_state_dict_legacy.pt"]) {
    const sd = loadTorchFile(readFixture(name), name);
    assert.ok(sd instanceof Map, `${name}: expected an OrderedDict`);
    assert.deepEqual(
      [...sd.keys()],
      ["0.weight", "0.bias", "2.weight", "2.bias"],
      `${name}: state_dict order`,
    );
    assertMatchesTwin(sd as Map<string, unknown>, "ckpt_state_dict.safetensors");
    for (const t of sd.values()) assert.equal((t as TorchTensor).requiresGrad, false);
  }
});

Deno.test("loadTorchFile() keeps DDP's module. names, and stripModulePrefix() removes them", () => {
  const sd = loadTorchFile(readFixture("ckpt_ddp_state_dict.pt"), "ckpt_ddp_state_dict.pt") as Map<
    string,
    unknown
  >;
  assert.deepEqual([...sd.keys()], [
    "module.0.weight",
    "module.0.bias",
    "module.2.weight",
    "module.2.bias",
  ]);
  assertMatchesTwin(sd, "ckpt_ddp_state_dict.safetensors");
  assertMatchesTwin(stripModulePrefix(sd), "ckpt_state_dict.safetensors");
  const mixed = new Map([["module.a", 1], ["b", 2]]);
  assert.equal(
    stripModulePrefix(mixed),
    mixed,
    "a map where not every key has the prefix is returned unchanged",
  );
});

Deno.test("loadTorchFile() reads ckpt_full.pt: model, optimizer state and param groups equal the twin", () => {
  const ckpt = loadTorchFile(readFixture("ckpt_full.pt"), "ckpt_full.pt") as Map<string, unknown>;
  const { tensors, metadata } = parseSafetensors(
    readFixture("ckpt_full.safetensors"),
    "ckpt_full.safetensors",
  );
  const flat = flattenStateDict(ckpt);
  const tensorNames = [...flat].filter(([, v]) => v instanceof TorchTensor).map(([k]) => k);
  assert.deepEqual(tensorNames.sort(), [...tensors.keys()].sort());
  for (const [name, tensor] of tensors) assertSameTensor(flat.get(name), tensor, name);
  assert.deepEqual([...flat.keys()].filter((k) => !tensors.has(k)), [
    "epoch",
    "optimizer_state_dict.param_groups",
  ]);
  assert.equal(flat.get("epoch"), Number(metadata.epoch));
  assert.deepStrictEqual(
    toJsonValue(flat.get("optimizer_state_dict.param_groups")),
    JSON.parse(metadata.param_groups!),
  );
  // Python types survive: int keys in the optimizer state, betas as a tuple, foreach as None.
  const optimizer = ckpt.get("optimizer_state_dict") as Map<string, unknown>;
  assert.deepEqual([...(optimizer.get("state") as Map<unknown, unknown>).keys()], [0, 1, 2, 3]);
  const group = (optimizer.get("param_groups") as Map<string, unknown>[])[0]!;
  assert.ok(Object.isFrozen(group.get("betas")));
  assert.equal(group.get("foreach"), null);
});

Deno.test("loadTorchFile() reads gpt_mini's state dict with lm_head.weight tied to transformer.wte.weight", () => {
  const sd = loadTorchFile(
    readFixture("ckpt_gpt_mini_state_dict.pt"),
    "ckpt_gpt_mini_state_dict.pt",
  ) as Map<string, TorchTensor>;
  assert.equal(sd.size, 31);
  const twin = parseSafetensors(readFixture("gpt_mini_params.safetensors")).tensors;
  assert.equal(twin.size, 28);
  for (const [name, tensor] of twin) assertSameTensor(sd.get(name), tensor, name);
  const wte = sd.get("transformer.wte.weight")!;
  const head = sd.get("lm_head.weight")!;
  assertSameTensor(head, twin.get("transformer.wte.weight")!, "lm_head.weight");
  assert.equal(head.storageKey, wte.storageKey);
  assert.ok(
    head.data.buffer === wte.data.buffer && head.data.byteOffset === wte.data.byteOffset,
    "tied tensors share bytes",
  );
  for (const layer of [0, 1]) {
    const mask = sd.get(`transformer.h.${layer}.attn.bias`)!;
    assert.deepEqual(mask.shape, [1, 1, 64, 64]);
    const m = asFloat32Array(mask);
    for (let i = 0; i < 64; i++) {
      for (let j = 0; j < 64; j++) assert.equal(m[i * 64 + j], j <= i ? 1 : 0);
    }
  }
});

Deno.test("readTorchFile() reads from a path and names it in errors", () => {
  const sd = readTorchFile(fixturePath("ckpt_state_dict.pt")) as Map<string, unknown>;
  assert.equal(sd.size, 4);
  assert.throws(
    () => readTorchFile(fixturePath("toy_mlp.json")),
    new RegExp(`Invalid torch checkpoint ${fixturePath("toy_mlp.json")}: not a torch.save file`),
  );
});

/** Six floats 0..5 in storage "0", viewed in several strided ways; both file formats. */
function stridedCheckpoint(legacy: boolean): Uint8Array {
  const view = (
    offset: number,
    size: number[],
    stride: number[],
    extra: Partial<TensorSpec> = {},
  ) => tensorOps({ key: "0", numel: 6, offset, size, stride, legacy, ...extra });
  const pickle = new PickleWriter().proto(2).value(orderedDictOps([
    ["transposed", view(0, [3, 2], [1, 3])],
    ["every_other", view(1, [2], [2])],
    ["expanded", view(0, [2, 3], [0, 1])],
    ["scalar", view(5, [], [])],
    ["empty", view(6, [0, 3], [3, 1])],
    ["whole", view(0, [2, 3], [3, 1])],
    ["tied_row", view(3, [1, 3], [99, 1])],
    ["param", (w: PickleWriter) => {
      w.global("torch._utils", "_rebuild_parameter").mark();
      view(0, [6], [1])(w);
      w.value(true).global("collections", "OrderedDict").raw(0x29).reduce().raw(0x74).reduce();
    }],
  ])).stop().bytes();
  const data = f32([0, 1, 2, 3, 4, 5]);
  return legacy
    ? buildLegacy(pickle, [{ key: "0", count: 6, data }])
    : buildTorchZip("strided", pickle, [["0", data]]);
}

Deno.test("loadTorchFile() materialises strided tensors contiguously and keeps contiguous ones as views", () => {
  for (const legacy of [false, true]) {
    const bytes = stridedCheckpoint(legacy);
    const sd = loadTorchFile(bytes, "strided.pt") as Map<string, TorchTensor>;
    assert.deepEqual(floatsOf(sd.get("transposed")), [0, 3, 1, 4, 2, 5]);
    assert.deepEqual(sd.get("transposed")!.shape, [3, 2]);
    assert.deepEqual(floatsOf(sd.get("every_other")), [1, 3]);
    assert.deepEqual(floatsOf(sd.get("expanded")), [0, 1, 2, 0, 1, 2]);
    assert.deepEqual(floatsOf(sd.get("scalar")), [5]);
    assert.deepEqual(sd.get("empty")!.data.length, 0);
    assert.deepEqual(floatsOf(sd.get("whole")), [0, 1, 2, 3, 4, 5]);
    assert.deepEqual(
      floatsOf(sd.get("tied_row")),
      [3, 4, 5],
      "a size-1 dimension's stride does not matter",
    );
    assert.equal(
      sd.get("whole")!.data.buffer,
      bytes.buffer,
      "a contiguous tensor is a view of the file",
    );
    assert.equal(sd.get("tied_row")!.data.buffer, bytes.buffer);
    assert.notEqual(sd.get("transposed")!.data.buffer, bytes.buffer);
    assert.equal(sd.get("param")!.requiresGrad, true, "_rebuild_parameter keeps requires_grad");
    assert.equal(sd.get("whole")!.requiresGrad, false);
  }
});

Deno.test("loadTorchFile() refuses forbidden globals inside zip and legacy checkpoints", () => {
  const evil = new PickleWriter().proto(2).global("os", "system").str("touch /tmp/pwned").raw(0x85)
    .reduce().stop().bytes();
  const message =
    'Forbidden global "os.system" in evil.pt: only state dicts and optimizer states can be loaded';
  assert.throws(() => loadTorchFile(buildTorchZip("evil", evil, []), "evil.pt"), { message });
  assert.throws(() => loadTorchFile(buildLegacy(evil, []), "evil.pt"), { message });
  const wrongStorage = new PickleWriter().proto(2).value(
    tensorOps({ storageType: "UntypedStorage", key: "0", numel: 1, size: [1], stride: [1] }),
  ).stop().bytes();
  assert.throws(
    () => loadTorchFile(buildTorchZip("x", wrongStorage, [["0", f32([1])]]), "evil.pt"),
    /Forbidden global "torch.UntypedStorage"/,
  );
});

Deno.test("loadTorchFile() rejects tensors that read outside their storage or blow the copy budget", () => {
  const one = (
    spec: Partial<TensorSpec>,
    storages: [string, Uint8Array][] = [["0", f32([1, 2, 3, 4])]],
  ) =>
    buildTorchZip(
      "x",
      pickleOf(tensorOps({ key: "0", numel: 4, size: [4], stride: [1], ...spec })),
      storages,
    );
  assertInvalid(
    () => loadTorchFile(one({ size: [5] }), "x.pt"),
    /tensor of size \[5\], stride \[1\], offset 0 reads element 4 of storage "0", which has 4/,
  );
  assertInvalid(() => loadTorchFile(one({ offset: 1 }), "x.pt"), /reads element 4 of storage "0"/);
  assertInvalid(
    () => loadTorchFile(one({ size: [2, 2], stride: [3, 1] }), "x.pt"),
    /reads element 4 of storage/,
  );
  assertInvalid(
    () => loadTorchFile(one({ size: [2], stride: [1, 1] }), "x.pt"),
    /size and stride differ in length/,
  );
  assertInvalid(
    () => loadTorchFile(one({ size: [1e9], stride: [0] }), "x.pt"),
    /would materialise 4000000000 bytes, over the remaining budget/,
  );
  assert.equal(
    (loadTorchFile(one({ size: [1000], stride: [0] }), "x.pt", {
      maxMaterializedBytes: 4000,
    }) as TorchTensor).data.length,
    4000,
  );
  assertInvalid(() => loadTorchFile(one({}, []), "x.pt"), /storage "0" has no entry "x\/data\/0"/);
  assertInvalid(
    () => loadTorchFile(one({}, [["0", f32([1, 2, 3])]]), "x.pt"),
    /storage "0" holds 12 bytes, expected 4 × 4 = 16/,
  );
  assertInvalid(
    () => loadTorchFile(one({ numel: 3 }), "x.pt"),
    /storage "0" holds 16 bytes, expected 3 × 4 = 12/,
  );
  const conflicting = pickleOf(
    new Tuple([
      tensorOps({ key: "0", numel: 4, size: [4], stride: [1] }),
      tensorOps({ storageType: "IntStorage", key: "0", numel: 4, size: [4], stride: [1] }),
    ]),
  );
  assertInvalid(
    () => loadTorchFile(buildTorchZip("x", conflicting, [["0", f32([1, 2, 3, 4])]]), "x.pt"),
    /storage "0" is referenced as F32×4 and as I32×4/,
  );
});

Deno.test("loadTorchFile() allows BUILD only on dicts and tensors, and checks allowed calls' arguments", () => {
  const zipOf = (emit: (w: PickleWriter) => void) => {
    const w = new PickleWriter().proto(2);
    emit(w);
    return buildTorchZip("x", w.stop().bytes(), [["0", f32([1, 2])]]);
  };
  const tensor = tensorOps({ key: "0", numel: 2, size: [2], stride: [1] });
  const load = (emit: (w: PickleWriter) => void) => loadTorchFile(zipOf(emit), "x.pt");
  assert.deepEqual(load((w) => w.raw(0x7d, 0x7d).build()), new Map()); // OrderedDict._metadata style
  assert.deepEqual(floatsOf(load((w) => w.value(tensor).raw(0x7d).build())), [1, 2]);
  assertInvalid(
    () => load((w) => w.raw(0x5d, 0x7d).build()),
    /setting the state of a list is not allowed/,
  );
  assertInvalid(
    () => load((w) => w.raw(0x7d).str("s").build()),
    /the state of a dict is a str, expected a dict/,
  );
  const call = (name: string, args: unknown[]) => (w: PickleWriter) =>
    w.value(new Global(name.slice(0, name.lastIndexOf(".")), name.slice(name.lastIndexOf(".") + 1)))
      .value(new Tuple(args)).reduce();
  assertInvalid(
    () => load(call("collections.OrderedDict", [[]])),
    /collections.OrderedDict was called with 1 arguments; torch.save passes none/,
  );
  assertInvalid(
    () => load(call("torch._utils._rebuild_tensor_v2", [1, 2])),
    /takes 6 or 7 arguments, got 2/,
  );
  assertInvalid(
    () =>
      load(
        call("torch._utils._rebuild_tensor_v2", [
          "s",
          0,
          new Tuple([]),
          new Tuple([]),
          false,
          null,
        ]),
      ),
    /_rebuild_tensor_v2 needs a storage, got a str/,
  );
  assertInvalid(
    () => load(call("torch._utils._rebuild_parameter", [1, true, null])),
    /_rebuild_parameter needs a tensor, got an int/,
  );
  const withArgs = (offset: unknown, size: unknown, grad: unknown) => (w: PickleWriter) => {
    w.global("torch._utils", "_rebuild_tensor_v2").mark();
    w.value(new Tuple(["storage", new Global("torch", "FloatStorage"), "0", "cpu", 2])).binpersid();
    w.value(offset).value(size).value(new Tuple([1])).value(grad).raw(0x4e, 0x74).reduce();
  };
  assertInvalid(
    () => load(withArgs(-1, new Tuple([2]), false)),
    /storage_offset is -1, expected a non-negative integer/,
  );
  assertInvalid(
    () => load(withArgs(2n ** 70n, new Tuple([2]), false)),
    /storage_offset is 1180591620717411303424, expected/,
  );
  assertInvalid(() => load(withArgs(0, "2", false)), /size is a str, expected a tuple of integers/);
  assertInvalid(
    () => load(withArgs(0, new Tuple([1.5]), false)),
    /size\[0\] is 1.5, expected a non-negative integer/,
  );
  assertInvalid(
    () => load(withArgs(0, new Tuple([2]), 1)),
    /requires_grad is an int, expected a bool/,
  );
});

Deno.test("loadTorchFile() rejects malformed zip checkpoints", () => {
  const pickle = pickleOf(new Map([["a", 1]]));
  assertInvalid(
    () => loadTorchFile(buildZip([{ name: "x/other", data: pickle }]), "x.pt"),
    /no "x\/data\.pkl" in the archive/,
  );
  assertInvalid(
    () => loadTorchFile(buildZip([{ name: "data.pkl", data: pickle }]), "x.pt"),
    /entry "data\.pkl" is not inside a top-level folder/,
  );
  assertInvalid(() => loadTorchFile(buildZip([]), "x.pt"), /the zip archive is empty/);
  assertInvalid(
    () => loadTorchFile(buildZip([{ name: "x/data.pkl", data: pickle, method: 8 }]), "x.pt"),
    /"x\/data\.pkl" of zip archive x\.pt: it is compressed \(method 8, deflate\)/,
  );
  const bigEndian = buildZip([{ name: "x/data.pkl", data: pickle }, {
    name: "x/byteorder",
    data: new TextEncoder().encode("big"),
  }]);
  assertInvalid(
    () => loadTorchFile(bigEndian, "x.pt"),
    /storages are stored big-endian; only little-endian is supported/,
  );
  const little = buildZip([{ name: "x/data.pkl", data: pickle }, {
    name: "x/byteorder",
    data: new TextEncoder().encode("little"),
  }]);
  assert.deepEqual(loadTorchFile(little, "x.pt"), new Map([["a", 1]]));
  const badPid = new PickleWriter().proto(2).value(new Tuple(["module", 1])).binpersid().stop()
    .bytes();
  assertInvalid(
    () => loadTorchFile(buildTorchZip("x", badPid, []), "x.pt"),
    /persistent id a tuple is not a \("storage", \.\.\.\) tuple/,
  );
  const badNumel = new PickleWriter().proto(2).value(
    new Tuple(["storage", new Global("torch", "FloatStorage"), "0", "cpu", -1]),
  )
    .binpersid().stop().bytes();
  assertInvalid(
    () => loadTorchFile(buildTorchZip("x", badNumel, []), "x.pt"),
    /storage "0" has element count -1/,
  );
});

Deno.test("loadTorchFile() explains a truncated checkpoint, as left by a full disk", () => {
  const bytes = readFixture("ckpt_state_dict.pt");
  assertInvalid(
    () => loadTorchFile(bytes.subarray(0, bytes.length >> 1), "x.pt"),
    /^Invalid zip archive x\.pt: no end-of-central-directory record \(not a zip file, or truncated\)$/,
  );
});

Deno.test("loadTorchFile() rejects malformed legacy checkpoints", () => {
  const obj = pickleOf(tensorOps({ key: "k", numel: 2, size: [2], stride: [1], legacy: true }));
  const data = f32([1, 2]);
  assert.deepEqual(
    floatsOf(loadTorchFile(buildLegacy(obj, [{ key: "k", count: 2, data }]), "x.pt")),
    [1, 2],
  );
  assertInvalid(
    () => loadTorchFile(buildLegacy(obj, [{ key: "k", count: 3, data }]), "x.pt"),
    /storage "k" holds 3 elements, the pickle says 2/,
  );
  assertInvalid(
    () => loadTorchFile(buildLegacy(obj, [{ key: "j", count: 2, data }]), "x.pt"),
    /storage key "j" in the key list is not used by the pickle/,
  );
  assertInvalid(
    () => loadTorchFile(buildLegacy(obj, []), "x.pt"),
    /storage "k" is used by a tensor but its data is missing/,
  );
  assertInvalid(
    () =>
      loadTorchFile(
        buildLegacy(obj, [{ key: "k", count: 2, data }, { key: "k", count: 2, data }]),
        "x.pt",
      ),
    /storage key "k" appears twice in the key list/,
  );
  const full = buildLegacy(obj, [{ key: "k", count: 2, data }]);
  assertInvalid(
    () => loadTorchFile(full.subarray(0, full.length - 1), "x.pt"),
    /storage "k": 8 bytes at byte \d+ run past the end of the file/,
  );
  assertInvalid(
    () => loadTorchFile(full.subarray(0, full.length - 12), "x.pt"),
    /storage "k": truncated before its element count/,
  );
  const bigEndian = new Map<string, unknown>([["little_endian", false]]);
  assertInvalid(
    () => loadTorchFile(buildLegacy(obj, [], { sysInfo: bigEndian }), "x.pt"),
    /written on a big-endian machine/,
  );
  assertInvalid(
    () => loadTorchFile(buildLegacy(obj, [], { magic: 7n }), "x.pt"),
    /the legacy magic number is missing/,
  );
  assertInvalid(
    () => loadTorchFile(new TextEncoder().encode("hello world"), "x.pt"),
    /not a torch\.save file: neither a zip archive nor a legacy pickle/,
  );
  const view = pickleOf(
    new Tuple([
      "storage",
      new Global("torch", "FloatStorage"),
      "k",
      "cpu",
      2,
      new Tuple(["k", 0, 2]),
    ]),
  );
  const viewPickle = new Uint8Array([...view.subarray(0, view.length - 1), 0x51, 0x2e]); // BINPERSID before STOP
  assertInvalid(
    () => loadTorchFile(buildLegacy(viewPickle, []), "x.pt"),
    /storage "k" is a storage view \(torch < 0\.4\), which is not supported/,
  );
});

Deno.test("flattenStateDict() names nested dicts with dots and refuses cycles, collisions and odd keys", () => {
  const inner = new Map<unknown, unknown>([[0, new Map([["step", 1]])], [1, new Map()]]);
  const flat = flattenStateDict(new Map<unknown, unknown>([["state", inner], ["lr", 0.1]]), "opt");
  assert.deepEqual([...flat], [["opt.state.0.step", 1], ["opt.state.1", new Map()], [
    "opt.lr",
    0.1,
  ]]);
  const loop = new Map<unknown, unknown>();
  loop.set("self", loop);
  assert.throws(() => flattenStateDict(loop), /the dict at "self" contains itself/);
  assert.throws(
    () => flattenStateDict(new Map<unknown, unknown>([["a.b", 1], ["a", new Map([["b", 2]])]])),
    /two entries both become "a\.b"/,
  );
  assert.throws(
    () => flattenStateDict(new Map([[Object.freeze([1]), 1]])),
    /only str and int keys make names/,
  );
  assert.throws(
    () => flattenStateDict([1]),
    /flattenStateDict\(\) needs a dict \(Map\), got object/,
  );
  let deep = new Map<unknown, unknown>([["leaf", 1]]);
  for (let i = 0; i < 100_000; i++) deep = new Map([["d", deep]]);
  assert.throws(() => flattenStateDict(deep), /dicts nest deeper than 512 levels/);
});

Deno.test("toJsonValue() converts dicts, tuples and lists, and refuses what JSON cannot hold", () => {
  assert.deepStrictEqual(
    toJsonValue([new Map<unknown, unknown>([["betas", Object.freeze([0.9, 0.999])], [3, null]])]),
    [{ betas: [0.9, 0.999], "3": null }],
  );
  assert.throws(() => toJsonValue(2n ** 64n), /Cannot convert the value \(bigint\) to JSON/);
  const t = new TorchTensor("F32", [1], false, "0");
  t.data = f32([1]);
  assert.throws(
    () => toJsonValue(new Map([["w", t]])),
    /Cannot convert "w" to JSON: it is a tensor/,
  );
  const loop: unknown[] = [];
  loop.push(loop);
  assert.throws(() => toJsonValue(loop), /"\[0\]" to JSON: it contains itself/);
  let deep: unknown = [];
  for (let i = 0; i < 100_000; i++) deep = [deep];
  assert.throws(() => toJsonValue(deep), /nested deeper than 512 levels/);
});
