/**
 * Test rank script: every rank runs barriers in a loop without `await` (so its store record never
 * leaves) and records its pid after the first few; rank <stop rank> (args: <stop rank> <after>)
 * stops itself with SIGSTOP right after barrier number <after>, while the others block in the next.
 */
import { getWorld, initProcessGroup } from "dtrain";

const [stopRank = "3", after = "20"] = Deno.args;
const { rank } = getWorld();
const pg = initProcessGroup();
for (let i = 0;; i++) {
  pg.barrier("step");
  if (i === 5) {
    Deno.writeTextFileSync(`${Deno.env.get("TEST_PID_DIR")}/rank-${rank}.pid`, String(Deno.pid));
  }
  if (rank === Number(stopRank) && i === Number(after)) Deno.kill(Deno.pid, "SIGSTOP");
}
