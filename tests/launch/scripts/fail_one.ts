/**
 * Test rank script: records its pid in $TEST_PID_DIR, then one rank fails
 * (args: <failing rank> <throw|reject|exit=N|kill|block|none> [delay ms]) while
 * every other rank waits at a store barrier that can never complete. The
 * failing rank writes the time it fails to $TEST_PID_DIR/failed-at. With
 * TEST_STUBBORN=1 the waiting ranks ignore SIGTERM and start a grandchild.
 */
import { storeBarrier } from "../../../distributed/control/rank_runtime.ts";

const rank = Number(Deno.env.get("RANK"));
const [failRank = "1", how = "throw", delay = "300"] = Deno.args;
const pidDir = Deno.env.get("TEST_PID_DIR");
Deno.writeTextFileSync(`${pidDir}/rank-${rank}.pid`, String(Deno.pid));

function nestedHelper(): never {
  throw new Error(`rank ${rank} exploded on purpose`);
}

if (rank === Number(failRank)) {
  await new Promise((r) => setTimeout(r, Number(delay)));
  if (how !== "none") Deno.writeTextFileSync(`${pidDir}/failed-at`, String(Date.now()));
  if (how === "throw") nestedHelper();
  if (how === "reject") Promise.reject(new TypeError(`rank ${rank} rejected on purpose`));
  if (how.startsWith("exit=")) {
    console.error(`rank ${rank} exits with ${how.slice(5)} on purpose`);
    Deno.exit(Number(how.slice(5)));
  }
  if (how === "kill") {
    console.error(`rank ${rank} is about to die without a word`);
    Deno.kill(Deno.pid, "SIGKILL");
  }
  if (how === "block") {
    // A synchronous wait, like a native call: this rank cannot run any JS,
    // so only the kernel (PDEATHSIG) can end it when the launcher dies.
    const word = new Int32Array(new SharedArrayBuffer(4));
    for (;;) Atomics.wait(word, 0, 0, 60_000);
  }
  await new Promise(() => setInterval(() => {}, 60_000)); // "none": run until stopped
}
if (Deno.env.get("TEST_STUBBORN") === "1") {
  // Ignore SIGTERM (the launcher must escalate to SIGKILL) and leave a
  // grandchild behind (the launcher must stop the whole process group).
  Deno.addSignalListener("SIGTERM", () => console.error(`rank ${rank} ignores SIGTERM`));
  const child = new Deno.Command("sleep", { args: ["60"] }).spawn();
  Deno.writeTextFileSync(`${pidDir}/child-${rank}.pid`, String(child.pid));
}
console.log(`rank ${rank} waits at the barrier`);
await storeBarrier("never");
