/**
 * Test rank script: every rank runs barriers in a loop (a training loop's
 * collectives, no await in between) and records its pid after the first few.
 */
import { getWorld, initProcessGroup } from "dtrain";

const { rank } = getWorld();
const pg = initProcessGroup();
for (let i = 0;; i++) {
  pg.barrier("step");
  if (i === 5) {
    Deno.writeTextFileSync(`${Deno.env.get("TEST_PID_DIR")}/rank-${rank}.pid`, String(Deno.pid));
  }
}
