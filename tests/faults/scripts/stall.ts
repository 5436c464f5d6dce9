/**
 * Test rank script: both ranks run allReduce in a loop; at collective 15,
 * rank 1 stops itself with SIGSTOP (args: "stop"), or rank 1 never reaches a
 * store barrier (args: "barrier"). Rank 0's own timeout (4 s) must end it.
 * With "none", 40 collectives run and both ranks exit 0.
 */
import { initProcessGroup } from "../../../distributed/init_process_group.ts";
import { storeBarrier } from "../../../distributed/control/rank_runtime.ts";

const rank = Number(Deno.env.get("RANK"));
const dir = Deno.env.get("TEST_PID_DIR")!;
Deno.writeTextFileSync(`${dir}/rank-${rank}.pid`, String(Deno.pid));
if (Deno.args[0] === "barrier") {
  if (rank === 1) await new Promise(() => setInterval(() => {}, 60_000));
  await storeBarrier("never-complete", { timeoutMs: 4000 });
} else {
  const pg = initProcessGroup();
  const buf = new Float32Array(4);
  const last = Deno.args[0] === "none" ? 40 : Infinity;
  for (let i = 1; i <= last; i++) {
    if (rank === 1 && i === 15 && Deno.args[0] === "stop") Deno.kill(Deno.pid, "SIGSTOP");
    pg.allReduce(buf, "sum", { timeoutMs: 4000 });
    await new Promise((r) => setTimeout(r, 1));
  }
  pg.close();
}
