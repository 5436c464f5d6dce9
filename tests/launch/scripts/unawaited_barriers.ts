/**
 * Test rank script: a loop of barriers with no `await` (named "step <i>", so the hang report says
 * which one). Rank 0 stops after barrier "step <last>" in a synchronous sleep (the event loop never
 * turns again), so rank 1 blocks in barrier "step <last + 1>" having queued, not sent, the store
 * records of its later barriers. Args: <last>.
 */
import { getWorld, initProcessGroup } from "dtrain";

const last = Number(Deno.args[0] ?? "200");
const { rank } = getWorld();
Deno.writeTextFileSync(`${Deno.env.get("TEST_PID_DIR")}/rank-${rank}.pid`, String(Deno.pid));
const pg = initProcessGroup();
for (let i = 1;; i++) {
  pg.barrier(`step ${i}`, { timeoutMs: 600_000 });
  if (rank === 0 && i === last) {
    // A synchronous wait: native code that never returns to the event loop.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 600_000);
  }
}
