/**
 * A control store that cannot be reached or served fails in seconds, naming
 * the address and the operating system's error, instead of hanging: a
 * loopback interface that is down (a network namespace of its own), a port
 * already taken, a node 0 that never comes up (exit 124: --rdzv-timeout
 * fired), and a listener that accepts but never answers.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { StoreClient, StoreError } from "../../distributed/control/store.ts";
import { freePort, REPO, TestRun, tokenFile } from "../launch/launch_helpers.ts";

const CLI = join(REPO, "cli.ts");
const CONFIG = join(REPO, "deno.json");
const OK = join(REPO, "tests/launch/scripts/print_env.ts");

function canUnshareNet(): boolean {
  try {
    return new Deno.Command("unshare", { args: ["-n", "true"], stderr: "null" }).outputSync()
      .success;
  } catch {
    return false;
  }
}

Deno.test({
  name:
    "with the loopback interface down, ./dtrain fails at once naming the address and the OS error",
  ignore: Deno.build.os !== "linux" || !canUnshareNet(),
  async fn() {
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-no-loopback-" });
    try {
      const t0 = performance.now();
      const out = await new Deno.Command("unshare", {
        args: ["-n", Deno.execPath(), "run", "-A", "--config", CONFIG, CLI, "--nproc", "2", OK],
        cwd: dir,
        stdout: "piped",
        stderr: "piped",
      }).output();
      const ms = performance.now() - t0;
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 2, stderr); // a launcher's own error (docs/CLI.md, exit status)
      assert.ok(ms < 10_000, `took ${ms} ms`);
      assert.match(
        stderr,
        /^dtrain: Cannot connect to the dtrain store at 127\.0\.0\.1:\d+: Network is unreachable \(os error 101\) \(the loopback interface seems to be down/m,
      );
      assert.deepEqual([...Deno.readDirSync(dir)], [], "nothing was left behind");
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});

Deno.test("a store port already in use is refused at once with the address and the OS error", async () => {
  const t = new TestRun();
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const port = (taken.addr as Deno.NetAddr).port;
    const r = await t.finish(t.launch(["--master-port", String(port), "--nproc", "1", OK]), 10_000);
    assert.equal(r.code, 2, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(
        `Cannot start the control store on 127\\.0\\.0\\.1:${port}: Address already in use \\(os error 98\\).*choose another --master-port`,
      ),
    );
  } finally {
    taken.close();
    await t.cleanup();
  }
});

Deno.test("a node whose node 0 never comes up says it is waiting, then fails with 124 at --rdzv-timeout", async () => {
  const t = new TestRun();
  try {
    const token = tokenFile(t, "token", 0o600);
    const args = ["--nnodes", "2", "--node-rank", "1", "--master-port", String(freePort())];
    const r = await t.finish(
      t.launch([...args, "--rdzv-timeout", "5", "--rdzv-token-file", token, OK]),
      20_000,
    );
    assert.equal(r.code, 124, r.stderr);
    assert.match(
      r.stderr,
      /waiting for node 0's control store at 127\.0\.0\.1:\d+: Connection refused \(os error 111\); retrying for up to 5 s/,
    );
    assert.match(
      r.stderr,
      /Cannot connect to the dtrain store at 127\.0\.0\.1:\d+ within 5000 ms: Connection refused \(os error 111\) \(--rdzv-timeout 5 s\)/,
    );
    assert.ok(r.elapsedMs < 15_000, `took ${r.elapsedMs} ms`);
  } finally {
    await t.cleanup();
  }
});

Deno.test("StoreClient.connect() gives up on a listener that never answers the authentication", async () => {
  const silent = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    try {
      for await (const c of silent) held.push(c);
    } catch { /* closed */ }
  })();
  try {
    const t0 = performance.now();
    await assert.rejects(
      () =>
        StoreClient.connect({
          host: "127.0.0.1",
          port: (silent.addr as Deno.NetAddr).port,
          token: "t",
          timeoutMs: 1500,
        }),
      (e: Error) => {
        assert.ok(e instanceof StoreError && e.kind === "connect");
        assert.match(e.message, /within 1500 ms: no answer to authentication within \d+ ms/);
        return true;
      },
    );
    assert.ok(performance.now() - t0 < 5000);
  } finally {
    silent.close();
    for (const c of held) c.close();
    await accepting;
  }
});
