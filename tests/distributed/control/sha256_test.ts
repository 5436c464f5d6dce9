/** The store's SHA-256 gives node:crypto's digest for every length around the block edges, and more. */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { constantTimeEqual, sha256 } from "../../../distributed/control/sha256.ts";

const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

Deno.test("sha256() matches node:crypto on the standard vectors and on random inputs of 0..300 bytes", () => {
  assert.equal(
    hex(sha256(new Uint8Array())),
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  );
  assert.equal(
    hex(sha256(new TextEncoder().encode("abc"))),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
  for (let n = 0; n <= 300; n++) {
    const data = crypto.getRandomValues(new Uint8Array(n));
    assert.equal(hex(sha256(data)), createHash("sha256").update(data).digest("hex"), `n=${n}`);
  }
  const big = crypto.getRandomValues(new Uint8Array(65_536)).subarray(3, 60_001);
  assert.equal(hex(sha256(big)), createHash("sha256").update(big).digest("hex"));
});

Deno.test("constantTimeEqual() is plain equality of bytes", () => {
  const a = new Uint8Array([1, 2, 3]);
  assert.ok(constantTimeEqual(a, new Uint8Array([1, 2, 3])));
  assert.ok(!constantTimeEqual(a, new Uint8Array([1, 2, 4])));
  assert.ok(!constantTimeEqual(a, new Uint8Array([1, 2])));
  assert.ok(constantTimeEqual(new Uint8Array(), new Uint8Array()));
});
