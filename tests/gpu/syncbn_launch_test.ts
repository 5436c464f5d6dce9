/**
 * Where the SyncBatchNorm parity check starts its two ranks from
 * (parity/syncbn.ts rankLaunch): in a checkout, cli.ts with the checkout's
 * deno.json; bundled in the device bundle's js/, the single file that runs
 * the check and the rank script bundled beside it — never a checkout path,
 * which does not exist on the GPU machine.
 */
import assert from "node:assert/strict";
import { rankLaunch } from "../../parity/syncbn.ts";

Deno.test("rankLaunch(): a checkout starts cli.ts with its config and parity/syncbn_rank.ts", () => {
  const l = rankLaunch("file:///repo/parity/syncbn.ts", {});
  assert.equal(l.command, Deno.execPath());
  assert.deepEqual(l.prefix, ["run", "-A", "--config", "/repo/deno.json", "/repo/cli.ts"]);
  assert.equal(l.rankScript, "/repo/parity/syncbn_rank.ts");
});

Deno.test("rankLaunch(): bundled, the single file that runs it and js/syncbn_rank.js beside the chunk", () => {
  const l = rankLaunch("file:///b/gpu-check/js/chunk-ABC.js", {
    DTRAIN_SFX_FILE: "/b/gpu-check/dtrain",
  });
  assert.deepEqual(l, {
    command: "/b/gpu-check/dtrain",
    prefix: [],
    rankScript: "/b/gpu-check/js/syncbn_rank.js",
  });
  assert.throws(() => rankLaunch("file:///b/js/chunk-ABC.js", {}), /DTRAIN_SFX_FILE .* is not set/);
});
