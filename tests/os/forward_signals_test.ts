/**
 * waitForwardingSignals: a SIGTERM sent to the waiting process reaches the
 * child it stands in for, and the child's death by that signal becomes the
 * waiting process's exit status 143.
 */
import assert from "node:assert/strict";

const WAITER = `
import { waitForwardingSignals } from ${
  JSON.stringify(new URL("../../os/forward_signals.ts", import.meta.url).href)
};
const child = new Deno.Command(Deno.execPath(), {
  args: ["eval", "setInterval(() => {}, 1000)"],
  stdout: "null",
}).spawn();
const ended = waitForwardingSignals(child); // its listeners are in place when this returns
console.log(child.pid);
Deno.exit(await ended);
`;

Deno.test("a SIGTERM to the waiting process ends its child, and the exit status says so", async () => {
  const waiter = new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", WAITER],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = waiter.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  const grandchild = Number(text.trim());
  try {
    // The waiter prints the pid only once its listeners are in place: the signal is never lost.
    waiter.kill("SIGTERM");
    // A waiter that swallowed the signal would wait forever: bound it (generously) so it fails.
    const bound = setTimeout(() => waiter.kill("SIGKILL"), 60_000);
    const status = await waiter.status.finally(() => clearTimeout(bound));
    assert.equal(status.code, 143, "the waiter did not end with its child's SIGTERM");
    let alive = true;
    try {
      Deno.kill(grandchild, "SIGCONT");
    } catch {
      alive = false;
    }
    assert.equal(alive, false, `the child ${grandchild} outlived the signal`);
  } finally {
    reader.releaseLock();
    await waiter.stdout.cancel().catch(() => {});
    try {
      Deno.kill(grandchild, "SIGKILL");
    } catch { /* gone, as it should be */ }
  }
});
