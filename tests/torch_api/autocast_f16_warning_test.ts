/**
 * autocast("f16") on a CPU warns once per process, suggesting bf16; bf16
 * and f32 do not warn.
 */
import assert from "node:assert/strict";
import { autocast, resetAutocastWarnings, setAutocastWarningSink } from "../../amp/autocast.ts";

Deno.test('autocast("f16") on the CPU warns once, naming bf16; bf16 and f32 stay quiet', () => {
  const seen: string[] = [];
  const prev = setAutocastWarningSink((m) => seen.push(m));
  try {
    resetAutocastWarnings();
    assert.equal(autocast("bf16", () => 1), 1);
    autocast("f32", () => 0);
    assert.deepEqual(seen, []);
    assert.equal(autocast("f16", () => 2), 2);
    autocast("f16", () => 3);
    assert.equal(seen.length, 1);
    assert.match(
      seen[0]!,
      /autocast\("f16"\) on a CPU runs several times slower than f32.*use autocast\("bf16"\)/,
    );
  } finally {
    setAutocastWarningSink(prev);
    resetAutocastWarnings();
  }
});
