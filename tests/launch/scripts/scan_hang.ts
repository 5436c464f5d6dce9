/**
 * Test rank script for the hang diagnosis (the original report's case):
 * rank 0 scans a large directory (args: <dir> <seconds>) under
 * phase("scan dataset"), walking it again and again, while every other rank
 * waits at the store barrier "after-scan". Then all pass the barrier.
 */
import { phase, storeBarrier } from "../../../distributed/control/rank_runtime.ts";

const rank = Number(Deno.env.get("RANK"));
const [dir = ".", secondsArg = "3"] = Deno.args;
const pidDir = Deno.env.get("TEST_PID_DIR");
if (pidDir) Deno.writeTextFileSync(`${pidDir}/rank-${rank}.pid`, String(Deno.pid));

if (rank === 0) {
  phase("scan dataset");
  const until = Date.now() + Number(secondsArg) * 1000;
  let files = 0;
  while (Date.now() < until) {
    // A synchronous walk, as a dataset indexer would do: the event loop is busy.
    for (const e of Deno.readDirSync(dir)) {
      if (e.isFile) files += Deno.statSync(`${dir}/${e.name}`).size >= 0 ? 1 : 0;
    }
  }
  console.log(`rank 0 scanned ${files} files`);
}
await storeBarrier("after-scan");
console.log(`rank ${rank} passed the barrier`);
