/**
 * Packing and unpacking the payload: the deterministic tar.gz, the header
 * whose offset points exactly at the payload, the streaming tar reader (and
 * its refusal of members that escape the destination), and the TypeScript
 * unpacking of the `deno compile` build under simultaneous starts.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  fillHeader,
  packPayload,
  writeManifest,
  writeSelfExtracting,
} from "../../single_file/pack.ts";
import { readTar } from "../../single_file/tar_reader.ts";
import { cacheFolder, ensureUnpacked } from "../../single_file/unpack.ts";
import { sha256File, STAMP_FILE } from "../../os/single_file_manifest.ts";

function scratch(): string {
  return Deno.makeTempDirSync({ prefix: "dtrain-pack-test-" });
}

/** A staged tree: an executable, a folder, a file of several tar blocks. */
function stage(dir: string): string {
  const root = join(dir, "root");
  Deno.mkdirSync(join(root, "bin"), { recursive: true });
  Deno.writeTextFileSync(join(root, "bin", "tool"), "#!/bin/sh\necho hi\n");
  Deno.chmodSync(join(root, "bin", "tool"), 0o755);
  Deno.writeFileSync(join(root, "data.bin"), new Uint8Array(5000).map((_, i) => i % 251));
  writeManifest(root, { dtrainVersion: "0", denoVersion: "0", libraries: {} });
  return root;
}

async function untarGz(path: string): Promise<Map<string, { mode: number; bytes: Uint8Array }>> {
  const file = await Deno.open(path);
  const entries = new Map<string, { mode: number; bytes: Uint8Array }>();
  for await (const e of readTar(file.readable.pipeThrough(new DecompressionStream("gzip")))) {
    const parts: Uint8Array[] = [];
    for await (const p of e.data) parts.push(p.slice());
    entries.set(e.type === "dir" ? `${e.name}/` : e.name, {
      mode: e.mode,
      bytes: new Uint8Array(parts.flatMap((p) => [...p])),
    });
  }
  return entries;
}

Deno.test("packPayload() is deterministic and readTar() gets every file back with its mode", async () => {
  const dir = scratch();
  try {
    const root = stage(dir);
    const a = await packPayload(root, join(dir, "a.tar.gz"));
    Deno.utimeSync(join(root, "data.bin"), new Date(2010, 1, 1), new Date(2010, 1, 1));
    const b = await packPayload(root, join(dir, "b.tar.gz"));
    assert.equal(a.sha256, b.sha256, "file times leaked into the payload");
    assert.equal(a.unpackedBytes, 5000 + 18 + Deno.statSync(join(root, "manifest.json")).size);
    const entries = await untarGz(a.path);
    assert.deepEqual([...entries.keys()].filter((k) => !k.endsWith("/")).sort(), [
      "bin/tool",
      "data.bin",
      "manifest.json",
    ]);
    assert.equal(entries.get("bin/tool")!.mode, 0o755);
    assert.deepEqual(entries.get("data.bin")!.bytes, Deno.readFileSync(join(root, "data.bin")));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("fillHeader() points tail -c +offset exactly at the payload", async () => {
  const dir = scratch();
  try {
    const payload = join(dir, "p.bin");
    Deno.writeFileSync(payload, new Uint8Array([0x1f, 0x8b, 1, 2, 3, 0, 255]));
    const template =
      "#!/bin/sh\nid=@PAYLOAD_ID@ v=@VERSION@ mb=@UNPACKED_MB@\noff=@OFFSET@\nexit 0\n";
    const header = fillHeader(template, {
      version: "1.2.3",
      payloadId: "1.2.3-abc",
      unpackedMb: 93,
    });
    const text = new TextDecoder().decode(header);
    assert.match(text, /^id=1\.2\.3-abc v=1\.2\.3 mb=93$/m);
    const offset = Number(/^off=(\d+) *$/m.exec(text)![1]);
    assert.equal(offset, header.length + 1);
    const out = join(dir, "single");
    const written = await writeSelfExtracting(header, payload, out);
    assert.equal(written.sha256, sha256File(out));
    const tail = new Deno.Command("tail", { args: ["-c", `+${offset}`, out] }).outputSync();
    assert.deepEqual(tail.stdout, Deno.readFileSync(payload));
    assert.throws(
      () => fillHeader("no field", { version: "", payloadId: "", unpackedMb: 0 }),
      /@OFFSET@ exactly once/,
    );
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

/** One ustar header block for `name` with a valid checksum. */
function tarHeader(name: string, size: number): Uint8Array {
  const h = new Uint8Array(512);
  const put = (off: number, s: string) => h.set(new TextEncoder().encode(s), off);
  put(0, name);
  put(100, "0000644\0");
  put(124, size.toString(8).padStart(11, "0") + "\0");
  h[156] = "0".charCodeAt(0);
  put(257, "ustar\0");
  put(148, "        ");
  const sum = h.reduce((a, b) => a + b, 0);
  put(148, sum.toString(8).padStart(6, "0") + "\0 ");
  return h;
}

async function drain(bytes: Uint8Array): Promise<string[]> {
  const names: string[] = [];
  // a few odd-sized pieces, as a decompressor hands them out
  const pieces = (async function* () {
    for (let i = 0; i < bytes.length; i += 300) yield bytes.subarray(i, i + 300);
  })();
  for await (const e of readTar(pieces)) {
    names.push(e.name);
    for await (const _ of e.data) { /* skip */ }
  }
  return names;
}

Deno.test("readTar() refuses members outside the destination, damaged headers and cut-off archives", async () => {
  const end = new Uint8Array(1024);
  const ok = new Uint8Array([...tarHeader("./a/b.txt", 3), ...new Uint8Array(512), ...end]);
  assert.deepEqual(await drain(ok), ["a/b.txt"]);
  const escape = new Uint8Array([...tarHeader("../evil", 0), ...end]);
  await assert.rejects(drain(escape), /"\.\.\/evil" would be written outside the destination/);
  const absolute = new Uint8Array([...tarHeader("/etc/x", 0), ...end]);
  await assert.rejects(drain(absolute), /would be written outside/);
  const bad = tarHeader("x", 0);
  bad[0] = "y".charCodeAt(0);
  await assert.rejects(drain(new Uint8Array([...bad, ...end])), /checksum mismatch/);
  await assert.rejects(drain(tarHeader("x", 700)), /ends inside "x"/);
});

Deno.test("ensureUnpacked() unpacks once, verified, when four starts race, and reuses the folder", async () => {
  const dir = scratch();
  try {
    const root = stage(dir);
    const payload = await packPayload(root, join(dir, "payload.tar.gz"));
    const info = { id: "0-test", unpackedBytes: payload.unpackedBytes };
    const cache = join(dir, "cache");
    const env = (n: string) => (n === "DTRAIN_CACHE" ? cache : undefined);
    const dirs = await Promise.all(
      Array.from({ length: 4 }, () => ensureUnpacked(payload.path, info, { env, single: "x" })),
    );
    assert.deepEqual(new Set(dirs), new Set([join(cache, "0-test")]));
    assert.deepEqual([...Deno.readDirSync(cache)].map((e) => e.name), ["0-test"]);
    const out = join(cache, "0-test");
    assert.ok(Deno.statSync(join(out, STAMP_FILE)).isFile);
    assert.equal(Deno.statSync(join(out, "bin", "tool")).mode! & 0o777, 0o755);
    assert.deepEqual(
      Deno.readFileSync(join(out, "data.bin")),
      Deno.readFileSync(join(root, "data.bin")),
    );
    const stamp = Deno.statSync(join(out, STAMP_FILE)).mtime;
    await ensureUnpacked(payload.path, info, { env, single: "x" });
    assert.deepEqual(Deno.statSync(join(out, STAMP_FILE)).mtime, stamp, "unpacked again");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("ensureUnpacked() says the file is damaged when its payload does not match its manifest", async () => {
  const dir = scratch();
  try {
    const root = stage(dir);
    Deno.writeTextFileSync(join(root, "bin", "tool"), "#!/bin/sh\necho HI\n"); // after the manifest
    const payload = await packPayload(root, join(dir, "payload.tar.gz"));
    const cache = join(dir, "cache");
    await assert.rejects(
      ensureUnpacked(payload.path, { id: "0-bad", unpackedBytes: 1 }, {
        env: (n) => (n === "DTRAIN_CACHE" ? cache : undefined),
        single: "/opt/dtrain",
      }),
      /the single file \/opt\/dtrain is damaged: .*bin\/tool has sha256/,
    );
    assert.deepEqual([...Deno.readDirSync(cache)], [], "the bad unpacking was left behind");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("cacheFolder() follows DTRAIN_CACHE, XDG_CACHE_HOME, then HOME, and names DTRAIN_CACHE without any", () => {
  const env = (vars: Record<string, string>) => (n: string) => vars[n];
  assert.equal(cacheFolder(env({ DTRAIN_CACHE: "/c", XDG_CACHE_HOME: "/x", HOME: "/h" })), "/c");
  assert.equal(cacheFolder(env({ XDG_CACHE_HOME: "/x", HOME: "/h" })), "/x/dtrain");
  assert.equal(cacheFolder(env({ HOME: "/h" })), "/h/.cache/dtrain");
  assert.throws(() => cacheFolder(env({})), /HOME is not set\. Set DTRAIN_CACHE/);
});
