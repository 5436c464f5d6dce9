/**
 * `dtrain exec script [args]`: one plain process with dtrain's Deno, its
 * "dtrain" import map and native library folder; the script's arguments and
 * exit status pass through; a missing script is a usage error (exit 2).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "./launch_helpers.ts";

Deno.test("dtrain exec runs a script alone with the library and passes its arguments and exit code", async () => {
  const t = new TestRun();
  try {
    const script = join(t.dir, "tool.ts");
    Deno.writeTextFileSync(
      script,
      `import { backend } from "dtrain";
console.log(JSON.stringify({ args: Deno.args, device: backend().device, rank: Deno.env.get("RANK") ?? null,
  libDir: Deno.env.get("DTRAIN_LIB_DIR") }));
Deno.exit(3);
`,
    );
    const r = await t.finish(t.launch(["exec", script, "--flag", "x y"]));
    assert.equal(r.code, 3, r.stderr);
    const out = JSON.parse(r.stdout.trim());
    assert.deepEqual(out.args, ["--flag", "x y"]);
    assert.equal(out.device, "cpu");
    assert.equal(out.rank, null, "exec starts no rank");
    assert.equal(out.libDir, join(REPO, "build"));
    const missing = await t.finish(t.launch(["exec", join(t.dir, "nope.ts")]));
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /exec: no script at .*nope\.ts/);
  } finally {
    await t.cleanup();
  }
});
