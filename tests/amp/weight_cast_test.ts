/**
 * autocast's weight cast cache: each parameter is cast to bf16 once, not once
 * per use, and a cached copy is never used after the parameter changed; the
 * checks (tests/amp/scripts/weight_cast_checks.ts) on the CPU and on the
 * emulated GPU.
 */
import assert from "node:assert/strict";
import { HAVE_EMU, lastJsonOf } from "../gpu/_emu.ts";
import { castOncePerChange, neverStale, rawWriteNeedsMark } from "./scripts/weight_cast_checks.ts";

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
    assert.deepEqual(await lastJsonOf("tests/amp/scripts/weight_cast_checks.ts", "cuda-emu"), {
      ok: true,
    });
  },
});
