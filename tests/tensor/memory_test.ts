import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { buildNative } from "../../scripts/build_native.ts";

buildNative({ quiet: true });
const SCRIPT = fileURLToPath(new URL("./scripts/memory_loop.ts", import.meta.url));

Deno.test("a 10,000-step training loop keeps native and resident memory flat", async () => {
  // Its own process: test files share this one, and their allocations would show in its RSS.
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", SCRIPT],
    stderr: "inherit",
  }).output();
  assert.equal(out.code, 0);
  const [a, b] = JSON.parse(new TextDecoder().decode(out.stdout));
  // Native memory: the same blocks are live and cached after every step.
  assert.equal(b.live, a.live, "live native bytes changed between step 1,000 and 10,000");
  assert.equal(b.cached, a.cached, "cached native bytes changed between step 1,000 and 10,000");
  // Resident memory: V8's heap may breathe a little; a leak of one step's
  // temporaries (~0.4 MB) over 9,000 steps would add gigabytes.
  const growth = b.rss - a.rss;
  assert.ok(growth < 16 * 2 ** 20, `resident memory grew by ${(growth / 2 ** 20).toFixed(1)} MiB`);
});
