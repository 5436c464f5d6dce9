/**
 * autocast's weight cast cache: each parameter is cast to bf16 once, not once
 * per use, and a cached copy is never used after the parameter changed; the
 * checks (tests/amp/scripts/weight_cast_checks.ts) on the CPU and on the
 * emulated GPU.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { HAVE_EMU } from "../gpu/_emu.ts";
import { castOncePerChange, neverStale, rawWriteNeedsMark } from "./scripts/weight_cast_checks.ts";

const REPO = new URL("../..", import.meta.url).pathname;

Deno.test("under autocast a weight is cast once for many uses, and its gradient is the f32 parameter's", () => {
  castOncePerChange();
});

Deno.test("a cached weight copy is never used after the weight changed", () => {
  neverStale();
});

Deno.test("a raw write into a weight's memory is seen once markModified() says so", () => {
  rawWriteNeedsMark();
});

Deno.test({
  name: "on the emulated GPU the weight cast cache passes the same checks",
  ignore: !HAVE_EMU,
  async fn() {
    const r = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        join(REPO, "deno.json"),
        join(REPO, "tests/amp/scripts/weight_cast_checks.ts"),
        "cuda-emu",
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(r.stdout);
    assert.equal(r.code, 0, text + new TextDecoder().decode(r.stderr));
    assert.deepEqual(JSON.parse(text.trim().split("\n").at(-1)!), { ok: true });
  },
});
