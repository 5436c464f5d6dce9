/**
 * The extraction folder's verification (os/single_file_manifest.ts): the full sha256
 * pass that writes the stamp, the cheap stat check of later starts, and the
 * re-hash of a file whose stat changed; plus which layout os/install_layout.ts
 * reports for a module URL.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  checkExtractedFile,
  checkExtraction,
  DamagedExtractionError,
  readManifest,
  STAMP_FILE,
  verifyExtraction,
} from "../../os/single_file_manifest.ts";
import { writeManifest } from "../../single_file/pack.ts";
import { installLayout } from "../../os/install_layout.ts";

/** A small tree with a manifest, like a staged single file. */
function tree(): string {
  const root = Deno.makeTempDirSync({ prefix: "dtrain-manifest-test-" });
  Deno.mkdirSync(join(root, "lib"));
  Deno.writeTextFileSync(join(root, "lib", "libx.so"), "native code".repeat(100));
  Deno.writeTextFileSync(join(root, "deno.json"), "{}");
  writeManifest(root, {
    dtrainVersion: "9.9.9",
    denoVersion: "2.9.6",
    libraries: { "libx.so": "abc" },
  });
  return root;
}

Deno.test("writeManifest() lists every file with its size and sha256", () => {
  const root = tree();
  try {
    const m = readManifest(root);
    assert.deepEqual(m.files.map((f) => f.path), ["deno.json", "lib/libx.so"]);
    assert.equal(m.files[1]!.bytes, 1100);
    // sha256("{}")
    assert.equal(
      m.files[0]!.sha256,
      "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    );
    assert.deepEqual(m.libraries, { "libx.so": "abc" });
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("verifyExtraction() stamps a matching tree and refuses a changed file, naming it", () => {
  const root = tree();
  try {
    assert.throws(() => checkExtraction(root), /cannot read \.verified/);
    verifyExtraction(root);
    assert.ok(Deno.statSync(join(root, STAMP_FILE)).isFile);
    checkExtraction(root);
    Deno.writeTextFileSync(join(root, "deno.json"), "[]"); // same size, other bytes
    Deno.removeSync(join(root, STAMP_FILE));
    assert.throws(
      () => verifyExtraction(root),
      (e) =>
        e instanceof DamagedExtractionError &&
        /deno\.json has sha256 [0-9a-f]{64}, the manifest says 4413/.test(e.what),
    );
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("checkExtractedFile() re-hashes only a file whose stat changed, and accepts it if its bytes did not", () => {
  const root = tree();
  try {
    verifyExtraction(root);
    const lib = join(root, "lib", "libx.so");
    const original = Deno.readFileSync(lib);
    // touched, same bytes: the stat differs, the re-hash matches
    Deno.utimeSync(lib, new Date(2001, 0, 1), new Date(2001, 0, 1));
    checkExtractedFile(root, "lib/libx.so");
    const changed = original.slice();
    changed[0] ^= 1;
    Deno.writeFileSync(lib, changed);
    Deno.utimeSync(lib, new Date(2002, 0, 1), new Date(2002, 0, 1));
    assert.throws(
      () => checkExtractedFile(root, "lib/libx.so"),
      new RegExp(`lib/libx\\.so has sha256 .* Delete ${root} and start dtrain again`),
    );
    Deno.removeSync(lib);
    assert.throws(() => checkExtractedFile(root, "lib/libx.so"), /lib\/libx\.so is missing/);
    assert.throws(() => checkExtractedFile(root, "lib/other.so"), /not in its verification stamp/);
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("installLayout() tells a checkout (TypeScript) from the single file's bundle (JavaScript)", () => {
  assert.deepEqual(installLayout("file:///repo/os/install_layout.ts"), {
    kind: "checkout",
    root: "/repo",
    config: "/repo/deno.json",
    rankMain: "/repo/launch/rank_main.ts",
    probeMain: "/repo/check/probe_main.ts",
    cli: "/repo/cli.ts",
    libDir: "/repo/build",
  });
  assert.deepEqual(installLayout("file:///cache/dtrain/0.1.0-ab/js/chunk-XYZ.js"), {
    kind: "single-file",
    root: "/cache/dtrain/0.1.0-ab",
    config: "/cache/dtrain/0.1.0-ab/deno.json",
    rankMain: "/cache/dtrain/0.1.0-ab/js/rank_main.js",
    probeMain: "/cache/dtrain/0.1.0-ab/js/probe_main.js",
    cli: "/cache/dtrain/0.1.0-ab/js/dtrain.js",
    libDir: "/cache/dtrain/0.1.0-ab/lib",
  });
  assert.equal(installLayout("https://example.com/dtrain/os/install_layout.ts"), null);
  // this very checkout
  assert.equal(installLayout()?.kind, "checkout");
});
