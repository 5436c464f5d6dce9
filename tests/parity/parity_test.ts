import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { defaultFixtureDir } from "../../parity/fixtures.ts";
import { parityRows } from "../../parity/run.ts";

buildNative({ quiet: true });
const FIXTURES = defaultFixtureDir();
const deno = Deno.execPath();
const root = new URL("../..", import.meta.url).pathname;

Deno.test("parity: every comparison of the shipped PyTorch fixtures passes", async () => {
  const rows = await parityRows(FIXTURES);
  const failed = rows.filter((r) => !r.pass);
  assert.ok(
    rows.length > 400,
    `expected the full set of rows, got ${rows.length}`,
  );
  assert.deepEqual(
    failed.map((r) => `${r.case} ${r.quantity}: ${r.error} > ${r.tolerance} ${r.note ?? ""}`),
    [],
  );
});

Deno.test("deno task parity fails, naming the case, when a reference value is off", async () => {
  const dir = await Deno.makeTempDir();
  try {
    for (
      const f of [
        "toy_mlp.json",
        "toy_mlp_init.safetensors",
        "toy_mlp_data.safetensors",
        "toy_mlp_a_final.safetensors",
      ]
    ) {
      await Deno.copyFile(join(FIXTURES, f), join(dir, f));
    }
    const meta = JSON.parse(await Deno.readTextFile(join(dir, "toy_mlp.json")));
    // Keep only variant a, and push its 6th loss off by 1e-4 relative (10x the tolerance).
    meta.variants = { a: meta.variants.a };
    meta.variants.a.losses[5] *= 1 + 1e-4;
    await Deno.writeTextFile(join(dir, "toy_mlp.json"), JSON.stringify(meta));
    const out = await new Deno.Command(deno, {
      args: [
        "run",
        "-A",
        join(root, "scripts/parity.ts"),
        dir,
        "--only",
        "toy",
      ],
    })
      .output();
    const text = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 1, text);
    assert.match(text, /toy_mlp_a\s+per-step losses\s+max rel 1\.0\de-4.*FAIL/);
    assert.match(text, /toy_mlp_a\s+final weights .*PASS/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
