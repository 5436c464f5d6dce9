/**
 * `./dtrain` type-checks the script before any rank starts: a type error
 * stops the launch with deno's errors and no run directory; --no-check
 * starts it anyway; a passing check is remembered by the content of every
 * file of the script's graph, so an unchanged script is not checked again
 * and a changed imported module is (re-hashing only the files whose identity changed). Also: every script this repository's
 * tests and examples launch type-checks (the suite itself runs them with
 * DTRAIN_NO_CHECK=1, see scripts/test.sh).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "./launch_helpers.ts";
import { checkScriptTypes } from "../../check/type_check.ts";

const CONFIG = join(REPO, "deno.json");

/** A temp folder with a script importing dtrain and a helper module of its own. */
function project(dir: string, helperBody = "export const width = 4;"): string {
  Deno.writeTextFileSync(join(dir, "helper.ts"), helperBody);
  const script = join(dir, "train.ts");
  Deno.writeTextFileSync(
    script,
    `import { zeros } from "dtrain";\nimport { width } from "./helper.ts";\n` +
      `const t = zeros([width]);\nconsole.log("RAN", t.shape.length);\n`,
  );
  return script;
}

Deno.test("a script with a type error is refused before any rank starts; --no-check starts it", async () => {
  const t = new TestRun();
  try {
    // A type error that still runs: the value is a number, its declared type a string.
    const script = project(t.dir, "export const width: number = 4 as unknown as string;");
    const env = { DTRAIN_NO_CHECK: "", DTRAIN_CACHE: join(t.dir, "cache") };
    const refused = await t.finish(t.launch(["--nproc", "2", script], { env }), 120_000);
    assert.equal(refused.code, 2, "a script refused before anything started: exit 2");
    assert.match(
      refused.stderr,
      /TS2322 \[ERROR\]: Type 'string' is not assignable to type 'number'/,
    );
    assert.match(refused.stderr, /helper\.ts:1:14/);
    assert.match(refused.stderr, /train\.ts does not type-check .*--no-check/);
    assert.doesNotMatch(refused.stdout, /RAN/);
    assert.throws(() => Deno.statSync(join(t.dir, "runs")), /No such file|not found/i);
    const unchecked = await t.finish(t.launch(["--no-check", script], { env }), 60_000);
    assert.equal(unchecked.code, 0, unchecked.stderr);
    assert.match(unchecked.stdout, /RAN 1/);
  } finally {
    await t.cleanup();
  }
});

Deno.test("checkScriptTypes() remembers a pass by the files' content, and checks again after a change", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-typecheck-" });
  try {
    const script = project(dir);
    const cacheDir = join(dir, "cache");
    let checks = 0;
    const opts = { config: CONFIG, cacheDir, onCheck: () => checks++ };
    assert.deepEqual(await checkScriptTypes(script, opts), { ok: true, cached: false });
    assert.deepEqual(await checkScriptTypes(script, opts), { ok: true, cached: true });
    assert.equal(checks, 1);
    Deno.writeTextFileSync(join(dir, "helper.ts"), "export const width = 5; // changed");
    assert.deepEqual(await checkScriptTypes(script, opts), { ok: true, cached: false });
    assert.equal(checks, 2);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("checkScriptTypes() hashes only the files whose size, times or inode changed since the pass", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-typecheck-" });
  try {
    const script = project(dir);
    const cacheDir = join(dir, "cache");
    let checks = 0;
    const opts = { config: CONFIG, cacheDir, onCheck: () => checks++ };
    assert.deepEqual(await checkScriptTypes(script, opts), { ok: true, cached: false });
    const [recordFile] = [...Deno.readDirSync(cacheDir)].map((e) => join(cacheDir, e.name));
    const pristine: { files: [string, string][]; hashedAt: number } = JSON.parse(
      Deno.readTextFileSync(recordFile!),
    );
    const helper = join(dir, "helper.ts");
    // The files were written just before the pass, so they would be hashed again (changed in the
    // same clock tick, their times could hide a later change): the record is moved past that window.
    const aged = (rec: typeof pristine) => ({ ...rec, hashedAt: Date.now() + 60_000 });
    // A wrong digest of a file whose identity holds is not noticed: proof that it was not re-read.
    const wrong = aged(pristine);
    wrong.files = wrong.files.map((
      [f, h]: [string, string],
    ) => [f, f === helper ? "0".repeat(64) : h]);
    Deno.writeTextFileSync(recordFile!, JSON.stringify(wrong));
    assert.deepEqual(await checkScriptTypes(script, opts), { ok: true, cached: true });
    // Same size and the modification time put back: the status-change time still shows the change.
    Deno.writeTextFileSync(recordFile!, JSON.stringify(aged(pristine)));
    const before = Deno.statSync(helper);
    Deno.writeTextFileSync(helper, "export const width = 5;");
    assert.equal(Deno.statSync(helper).size, before.size);
    Deno.utimeSync(helper, before.atime!, before.mtime!);
    assert.deepEqual(await checkScriptTypes(script, opts), { ok: true, cached: false });
    assert.equal(checks, 2);
    // A record without identities (written before they were kept) is checked by content, and then
    // holds them.
    const { stats: _stats, ...old } = JSON.parse(Deno.readTextFileSync(recordFile!));
    Deno.writeTextFileSync(recordFile!, JSON.stringify(old));
    assert.deepEqual(await checkScriptTypes(script, opts), { ok: true, cached: true });
    const refreshed = JSON.parse(Deno.readTextFileSync(recordFile!));
    assert.equal(refreshed.stats.length, refreshed.files.length);
    assert.deepEqual(refreshed.files, old.files);
    Deno.writeTextFileSync(helper, "export const width = 6;");
    assert.deepEqual(await checkScriptTypes(script, opts), { ok: true, cached: false });
    assert.equal(checks, 3);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("every script the tests and examples launch type-checks", async () => {
  const scripts: string[] = [];
  const add = (folder: string) => {
    for (const e of Deno.readDirSync(join(REPO, folder))) {
      if (e.isFile && e.name.endsWith(".ts")) scripts.push(join(REPO, folder, e.name));
    }
  };
  add("examples");
  add("examples/broken");
  for (const e of Deno.readDirSync(join(REPO, "tests"))) {
    try {
      if (e.isDirectory) add(join("tests", e.name, "scripts"));
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["check", "--config", CONFIG, ...scripts],
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
});
