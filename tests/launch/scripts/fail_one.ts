/**
 * Test rank script: records its pid in $TEST_PID_DIR, then one rank fails
 * (args: <failing rank> <throw|reject|exit=N|none> [delay ms]) while every
 * other rank waits at a store barrier that can never complete.
 */
import { storeBarrier } from "../../../distributed/rank_runtime.ts";

const rank = Number(Deno.env.get("RANK"));
const [failRank = "1", how = "throw", delay = "300"] = Deno.args;
Deno.writeTextFileSync(`${Deno.env.get("TEST_PID_DIR")}/rank-${rank}.pid`, String(Deno.pid));

function nestedHelper(): never {
  throw new Error(`rank ${rank} exploded on purpose`);
}

if (rank === Number(failRank)) {
  await new Promise((r) => setTimeout(r, Number(delay)));
  if (how === "throw") nestedHelper();
  if (how === "reject") Promise.reject(new TypeError(`rank ${rank} rejected on purpose`));
  if (how.startsWith("exit=")) {
    console.error(`rank ${rank} exits with ${how.slice(5)} on purpose`);
    Deno.exit(Number(how.slice(5)));
  }
  await new Promise(() => {}); // "none": never finish
}
console.log(`rank ${rank} waits at the barrier`);
await storeBarrier("never");
