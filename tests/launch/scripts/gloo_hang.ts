/**
 * Test rank script: the hang case with the Gloo backend. Rank <hang rank>
 * (args: <hang rank> <dir> <seconds>) scans a directory under
 * phase("scan dataset") while the others block in pg.barrier("after-scan"),
 * a synchronous native wait whose own timeout is longer than the launcher's.
 */
import { getWorld, initProcessGroup, phase } from "dtrain";

const [hangRank = "3", dir = ".", secondsArg = "3"] = Deno.args;
const { rank } = getWorld();
Deno.writeTextFileSync(`${Deno.env.get("TEST_PID_DIR")}/rank-${rank}.pid`, String(Deno.pid));
const pg = initProcessGroup();
if (rank === Number(hangRank)) {
  phase("scan dataset");
  const until = Date.now() + Number(secondsArg) * 1000;
  while (Date.now() < until) for (const _ of Deno.readDirSync(dir)) { /* index the dataset */ }
}
pg.barrier("after-scan", { timeoutMs: 600_000 });
console.log(`rank ${rank} passed the barrier`);
pg.close();
