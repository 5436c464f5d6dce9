/**
 * A rank's state page: a mapped file whose every write replaces the record (a shorter record leaves
 * no bytes of a longer one); the reader — another process, as the launcher is — gives the record
 * with its age, reads a torn page again, keeps the last record of a rank that died, and says why a
 * page is not one.
 */
import assert from "node:assert/strict";
import {
  parseStatePage,
  readStatePage,
  readStatePageResult,
  StatePage,
  statePagePath,
} from "../../../distributed/control/state_page.ts";

const PAGE_MODULE = new URL("../../../distributed/control/state_page.ts", import.meta.url).href;

function withDir(fn: (dir: string) => void | Promise<void>): () => Promise<void> {
  return async () => {
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-state-page-" });
    try {
      await fn(dir);
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  };
}

const text = (r: { value: Uint8Array }) => new TextDecoder().decode(r.value);

Deno.test(
  "a state page holds the last record written, whole, with its age",
  withDir((dir) => {
    const path = statePagePath(dir, 3);
    assert.equal(readStatePage(path), null, "no page yet");
    const page = StatePage.open(path)!;
    assert.ok(page.mapped, "the page is a mapping: an update is no system call");
    assert.match(String((readStatePageResult(path) as { error: string }).error), /no record yet/);
    const long = JSON.stringify({ sentAt: Date.now() - 5000, phase: "x".repeat(600) });
    page.write(long);
    const short = JSON.stringify({ sentAt: Date.now() - 2000, coll: { seq: 7, op: "barrier" } });
    page.write(short);
    const read = readStatePage(path)!;
    assert.equal(text(read), short);
    assert.ok(read.ageMs >= 2000 && read.ageMs < 60_000, `age ${read.ageMs}`);
    // a record longer than the page grows it
    const huge = JSON.stringify({ sentAt: Date.now(), phase: "y".repeat(10_000) });
    page.write(huge);
    assert.equal(text(readStatePage(path)!), huge);
    assert.deepEqual(
      [...Deno.readDirSync(dir)].map((e) => e.name),
      ["rank-3.state"],
      "no temporary",
    );
    page.write("not json");
    assert.equal(readStatePage(path), null, "a page that is not a record is ignored");
    page.close();
    page.write(short); // closed: ignored, not a crash
  }),
);

Deno.test(
  "another process reads every record the rank stores, never a mix of two, and the last one after the rank is killed",
  withDir(async (dir) => {
    const path = statePagePath(dir, 0);
    // The writer stores records of changing lengths as fast as it can, each with a pad as long as
    // its own count says, then a final record, then waits to be killed.
    const writer = new Deno.Command(Deno.execPath(), {
      args: [
        "eval",
        `import { StatePage } from ${JSON.stringify(PAGE_MODULE)};
         const page = StatePage.open(${JSON.stringify(path)});
         if (!page.mapped) throw new Error("not mapped");
         const t0 = Date.now();
         for (let n = 0; Date.now() - t0 < 1500; n++) {
           page.write(JSON.stringify({ sentAt: Date.now(), n, pad: "p".repeat(n % 97) }));
         }
         page.write(JSON.stringify({ sentAt: Date.now(), n: -1, phase: "last words" }));
         console.log("done");
         setInterval(() => {}, 1000);`,
      ],
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const reader = writer.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let good = 0, torn = 0;
    const seen = new Set<number>();
    const t0 = Date.now();
    while (Date.now() - t0 < 1200) {
      const r = readStatePageResult(path);
      if ("error" in r) {
        // before the writer's first record, or torn READ_TRIES times in a row while it stores
        const early = good === 0 && /cannot read|no record yet/.test(r.error);
        if (early || /checksum|only \d+/.test(r.error)) {
          torn++;
          continue;
        }
        assert.fail(r.error);
      }
      const rec = JSON.parse(text(r));
      assert.equal(rec.pad.length, rec.n % 97, `record ${rec.n} is whole`);
      seen.add(rec.n);
      good++;
    }
    assert.ok(seen.size > 10, `read ${seen.size} different records (${good} reads, ${torn} torn)`);
    assert.match((await reader.read()).value ?? "", /done/);
    writer.kill("SIGKILL");
    await writer.status;
    reader.releaseLock();
    await writer.stdout.cancel().catch(() => {});
    const last = readStatePage(path)!;
    assert.deepEqual(JSON.parse(text(last)).phase, "last words");
  }),
);

Deno.test("a torn read is read again, and rejected while it stays torn", () => {
  const good = new Uint8Array(256);
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-state-page-" });
  try {
    const path = statePagePath(dir, 0);
    const page = StatePage.open(path)!;
    const record = JSON.stringify({ sentAt: Date.now(), phase: "forward" });
    page.write(record);
    good.set(Deno.readFileSync(path).subarray(0, 256));
    page.close();
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
  // the record half replaced by the next one (same length, different bytes)
  const torn = good.slice();
  torn.set(new TextEncoder().encode('"backward"'), 24 + 10);
  assert.match(String((parseStatePage(torn) as { error: string }).error), /checksum/);
  let reads = 0;
  const once = readStatePageResult("p", () => ++reads === 1 ? torn : good);
  assert.equal(reads, 2, "read again after the torn read");
  assert.ok(!("error" in once) && JSON.parse(text(once)).phase === "forward");
  reads = 0;
  const never = readStatePageResult("p", () => (reads++, torn));
  assert.ok("error" in never && /checksum/.test(never.error), JSON.stringify(never));
  assert.ok(reads > 1 && reads < 10, `${reads} reads`);
  // a header announcing more than the page holds
  const cut = good.slice(0, 30);
  assert.match(String((parseStatePage(cut) as { error: string }).error), /only 6/);
});

Deno.test(
  "a short, foreign or old-format page file gives a clear error, not a crash",
  withDir((dir) => {
    const path = `${dir}/page`;
    const cases: [Uint8Array | string, RegExp][] = [
      ["", /at least 24 bytes; this one has 0/],
      ["DTSP1 0000", /at least 24 bytes; this one has 10/],
      ['{"sentAt": 1, "phase": "forward"}          ', /not a state page \(it starts "\{\\"sentAt/],
      ["DTSP1 zzzzzzzz 00000000\n{}", /not a state page/],
      [new Uint8Array(4096), /never written/],
    ];
    for (const [bytes, want] of cases) {
      if (typeof bytes === "string") Deno.writeTextFileSync(path, bytes);
      else Deno.writeFileSync(path, bytes);
      const r = readStatePageResult(path);
      assert.ok("error" in r, `${JSON.stringify(bytes)} is not a page`);
      assert.match(r.error, want);
      assert.ok(r.error.startsWith(path), "the error names the file");
      assert.equal(readStatePage(path), null);
    }
    assert.match(
      (readStatePageResult(`${dir}/absent`) as { error: string }).error,
      /cannot read .*absent/,
    );
  }),
);
