/**
 * A rank's state page: each synchronous write replaces the whole page (a shorter record leaves no
 * bytes of a longer one), and the reader gives the record with its age, or null when it is absent
 * or not a record.
 */
import assert from "node:assert/strict";
import {
  readStatePage,
  StatePage,
  statePagePath,
} from "../../../distributed/control/state_page.ts";

Deno.test("a state page holds the last record written, whole, with its age", () => {
  const dir = Deno.makeTempDirSync();
  try {
    const path = statePagePath(dir, 3);
    assert.equal(readStatePage(path), null, "no page yet");
    const page = StatePage.open(path)!;
    const long = JSON.stringify({ sentAt: Date.now() - 5000, phase: "x".repeat(600) });
    page.write(long);
    const short = JSON.stringify({ sentAt: Date.now() - 2000, coll: { seq: 7, op: "barrier" } });
    page.write(short);
    const read = readStatePage(path)!;
    assert.deepEqual(JSON.parse(new TextDecoder().decode(read.value)), JSON.parse(short));
    assert.ok(read.ageMs >= 2000 && read.ageMs < 60_000, `age ${read.ageMs}`);
    page.write("not json");
    assert.equal(readStatePage(path), null, "a page that is not a record is ignored");
    page.close();
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
