/**
 * Test rank script: the hang case with the real shared-memory process group.
 * Rank 0 scans a directory (args: <dir> <seconds>) under phase("scan dataset")
 * while the others block in pg.barrier("after-scan"), a synchronous native wait.
 */
import { getWorld, initProcessGroup, phase } from "dtrain";

const [dir = ".", secondsArg = "3"] = Deno.args;
const { rank } = getWorld();
const pg = initProcessGroup();
if (rank === 0) {
  phase("scan dataset");
  const until = Date.now() + Number(secondsArg) * 1000;
  while (Date.now() < until) for (const _ of Deno.readDirSync(dir)) { /* index the dataset */ }
}
pg.barrier("after-scan");
console.log(`rank ${rank} passed the barrier`);
pg.close();
