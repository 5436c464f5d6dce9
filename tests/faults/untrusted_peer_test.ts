/**
 * Text from peers that never proved they hold the run's token is escaped and
 * length-capped before it reaches the launcher's terminal or log (a forged
 * identity cannot print a fake "finished" line or clear the screen), and a
 * flood of refused connections becomes one summary line per interval.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { StoreServer } from "../../distributed/control/store_server.ts";
import { encodeFrame, Op } from "../../distributed/control/store_protocol.ts";
import { onlyRunDir, REPO, TestRun, waitUntil } from "../launch/launch_helpers.ts";

const HOLD = join(REPO, "tests/faults/scripts/hold.ts");
const FORGED = "x\n[dtrain] run 1 finished: every rank exited 0\x1b[2J\u202e" + "A".repeat(180);

/** Connects, sends an AUTH frame with a wrong token and `identity`, waits for the store to close it. */
async function wrongToken(port: number, identity: string): Promise<void> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(encodeFrame(Op.AUTH, 1, [{ str: "not-the-token" }, { str: identity }]));
    const buf = new Uint8Array(4096);
    while (await conn.read(buf) !== null) { /* until the store closes it */ }
  } catch {
    /* reset by the store */
  } finally {
    try {
      conn.close();
    } catch { /* closed */ }
  }
}

// deno-lint-ignore no-control-regex
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/;

Deno.test("a forged identity is escaped and capped in the store's log line", async () => {
  const logs: string[] = [];
  const server = StoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    token: "the-real-token-0123456789",
    log: (l) => logs.push(l),
  });
  try {
    await wrongToken(server.port, FORGED);
    await waitUntil(() => logs.length > 0, 5000, "the refusal was logged");
    assert.equal(logs.length, 1);
    const line = logs[0]!;
    assert.ok(!line.includes("\n"), "no line break from the peer");
    assert.ok(!CONTROL.test(line), `a control character reached the log: ${JSON.stringify(line)}`);
    assert.match(
      line,
      /^store: refused connection from 127\.0\.0\.1:\d+: wrong token \(client says it is "x\\x0a\[dtrain\] run 1 finished: every rank exited 0\\x1b\[2J\\u\{202e\}A+…"\)$/,
    );
    assert.ok(line.length < 250, `the line is ${line.length} characters long`);
  } finally {
    await server.close();
  }
});

Deno.test("a flood of refused connections is summarised once per interval", async () => {
  const logs: string[] = [];
  const server = StoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    token: "the-real-token-0123456789",
    log: (l) => logs.push(l),
    refusalIntervalMs: 1500,
  });
  try {
    const flood = 300;
    for (let i = 0; i < flood; i += 30) {
      await Promise.all(Array.from({ length: 30 }, () => wrongToken(server.port, "flood")));
    }
    // Garbage before authentication is refused too, and counted under its own reason.
    const raw = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    await raw.write(new Uint8Array([1, 0, 0, 0, 99, 0, 0, 0, 0, 0]));
    await waitUntil(
      () => logs.some((l) => /refused \d+ more/.test(l)),
      10_000,
      "the summary line was written",
    );
    raw.close();
    assert.equal(logs.length, 2, logs.join("\n"));
    assert.match(logs[0]!, /refused connection from .*wrong token \(client says it is "flood"\)/);
    assert.match(
      logs[1]!,
      /^store: refused 300 more connection\(s\) in the last 2 s \(wrong token: 299, malformed frame before authentication: 1; from 127\.0\.0\.1\)$/,
    );
  } finally {
    await server.close();
  }
});

Deno.test("through the launcher: a forged identity cannot print a line or a terminal escape", async () => {
  const t = new TestRun();
  try {
    const l = t.launch(["--nproc", "1", HOLD]);
    await waitUntil(
      () => {
        try {
          return Deno.readTextFileSync(join(t.pidDir, "port")) !== "";
        } catch {
          return false;
        }
      },
      20_000,
      "the rank reported the store's port",
    );
    const port = Number(Deno.readTextFileSync(join(t.pidDir, "port")));
    await wrongToken(port, FORGED);
    await waitUntil(() => /wrong token/.test(l.stderr()), 5000, "the launcher logged the refusal");
    Deno.writeTextFileSync(join(t.pidDir, "release"), "");
    const r = await t.finish(l);
    assert.equal(r.code, 0, r.stderr);
    const log = Deno.readTextFileSync(join(onlyRunDir(t.dir), "launcher.log"));
    for (const [where, text] of [["terminal", r.stderr], ["launcher.log", log]]) {
      assert.ok(!CONTROL.test(text!), `a control character reached the ${where}`);
      const finished = text!.split("\n").filter((x) => /finished: every rank exited 0/.test(x));
      assert.equal(finished.length, 2, `${where}: only the real line and the escaped claim`);
      assert.ok(finished.some((x) => /client says it is "x\\x0a\[dtrain\] run 1 finished/.test(x)));
    }
  } finally {
    await t.cleanup();
  }
});
