/**
 * Test rank script for --max-restarts: on the first attempt rank 1 throws
 * while the others wait at a store barrier; on a restart every rank prints
 * DTRAIN_RESTART_COUNT, passes the same barrier, and exits 0.
 */
import { storeBarrier } from "../../../distributed/control/rank_runtime.ts";

const rank = Number(Deno.env.get("RANK"));
const restart = Deno.env.get("DTRAIN_RESTART_COUNT");
console.log(`rank ${rank} sees DTRAIN_RESTART_COUNT=${restart}`);
if (restart === "0" && rank === 1) {
  await new Promise((r) => setTimeout(r, 300));
  throw new Error("first attempt fails on purpose");
}
await storeBarrier("sync");
console.log(`rank ${rank} passed the barrier on restart ${restart}`);
