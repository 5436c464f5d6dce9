/**
 * The build's choice between `deno compile` and the self-extracting file
 * (single_file/build_mode.ts). No denort exists here, so the compile branch of the
 * build is exercised through this decision logic, and the compile call itself
 * with a stand-in runtime (see the last test).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  type BuildModeInput,
  chooseBuildMode,
  denortCachePath,
  denortUrl,
} from "../../single_file/build_mode.ts";
import { buildBlocker } from "./_sandbox.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));

function input(over: Partial<BuildModeInput> & { files?: string[] } = {}): BuildModeInput {
  const files = new Set(over.files ?? []);
  return {
    request: "auto",
    env: () => undefined,
    denoDir: "/dd",
    denoVersion: "2.9.6",
    exists: (p) => files.has(p),
    canDownload: () => Promise.resolve(false),
    ...over,
  };
}

Deno.test("chooseBuildMode() builds the self-extracting file when no runtime is anywhere, saying why", async () => {
  const m = await chooseBuildMode(input());
  assert.equal(m.kind, "sfx");
  assert.match(m.why, /DENORT_BIN is not set/);
  assert.ok(m.why.includes(denortCachePath("/dd", "2.9.6")));
  assert.ok(m.why.includes(`${denortUrl("2.9.6")} cannot be reached`));
  const offline = await chooseBuildMode(input({ canDownload: null }));
  assert.match(offline.why, /downloads are off \(--offline\)/);
});

Deno.test("chooseBuildMode() takes deno compile with DENORT_BIN, a cached archive, or a reachable download", async () => {
  const bin = await chooseBuildMode(
    input({ env: (n) => (n === "DENORT_BIN" ? "/opt/denort" : undefined), files: ["/opt/denort"] }),
  );
  assert.deepEqual(bin, { kind: "compile", runtime: "/opt/denort", why: "DENORT_BIN=/opt/denort" });
  const archive = "/dd/dl/release/v2.9.6/denort-x86_64-unknown-linux-gnu.zip";
  assert.equal(denortCachePath("/dd", "2.9.6"), archive);
  const cached = await chooseBuildMode(input({ files: [archive] }));
  assert.equal(cached.kind, "compile");
  assert.equal(cached.kind === "compile" && cached.runtime, archive);
  let asked = 0;
  const online = await chooseBuildMode(input({ canDownload: () => Promise.resolve(++asked > 0) }));
  assert.equal(online.kind === "compile" && online.runtime, denortUrl("2.9.6"));
  assert.equal(asked, 1);
});

Deno.test("chooseBuildMode() does not probe the network when a local runtime exists or --sfx is given", async () => {
  const never = () => Promise.reject(new Error("must not be asked"));
  const archive = denortCachePath("/dd", "2.9.6");
  assert.equal(
    (await chooseBuildMode(input({ files: [archive], canDownload: never }))).kind,
    "compile",
  );
  assert.equal((await chooseBuildMode(input({ request: "sfx", canDownload: never }))).kind, "sfx");
});

Deno.test("chooseBuildMode() refuses a DENORT_BIN that does not exist and --compile without a runtime", async () => {
  await assert.rejects(
    chooseBuildMode(input({ env: (n) => (n === "DENORT_BIN" ? "/nope/denort" : undefined) })),
    /DENORT_BIN=\/nope\/denort does not exist/,
  );
  await assert.rejects(
    chooseBuildMode(input({ request: "compile" })),
    /Cannot build with deno compile \(--compile\): .*build the self-extracting file \(--sfx\)/,
  );
});

Deno.test({
  name:
    "build_single.ts --compile embeds the payload with deno compile (a stand-in runtime: no denort here)",
  ignore: buildBlocker(REPO) !== null, // the reason is printed by single_file_test.ts
  fn: async () => {
    // /bin/true plays denort: deno compile appends the program and its --include'd
    // payload to it. The result cannot run dtrain; what is checked is that the
    // compile branch builds, with the payload inside.
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-compile-test-" });
    try {
      const out = join(dir, "dtrain");
      const stage = join(dir, "stage");
      const r = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "scripts/build_single.ts",
          "--compile",
          "--gzip-level=1", // the size is not what this test is about
          "--out",
          out,
          "--stage",
          stage,
        ],
        cwd: REPO,
        env: { DENORT_BIN: "/bin/true", DTRAIN_CUDA: "0" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr);
      assert.equal(r.code, 0, text);
      assert.match(text, /build: deno compile \(DENORT_BIN=\/bin\/true\)/);
      assert.match(text, /built .*: deno compile binary, [\d.]+ MB, sha256 [0-9a-f]{64}/);
      const payload = Deno.statSync(join(stage, "compiled", "payload.tar.gz")).size;
      assert.ok(Deno.statSync(out).size > payload, "the payload is not inside the compiled file");
      const id = JSON.parse(Deno.readTextFileSync(join(stage, "compiled", "payload.json"))).id;
      const bytes = Deno.readFileSync(out);
      assert.ok(
        new TextDecoder("latin1").decode(bytes).includes(id),
        "payload.json is not embedded",
      );
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});
