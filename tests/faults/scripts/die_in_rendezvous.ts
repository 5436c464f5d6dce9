/**
 * Test rank script: rank 0 joins the shared-memory process group (creating
 * its segment and waiting for the others to attach); rank 1 waits until the
 * segment exists, records that in $TEST_PID_DIR/segment-seen-<attempt>, and
 * dies before attaching (args: exit code, or "kill" for SIGKILL).
 */
import { initProcessGroup } from "../../../distributed/init_process_group.ts";

const rank = Number(Deno.env.get("RANK"));
const attempt = Deno.env.get("DTRAIN_RESTART_COUNT") ?? "0";
const dir = Deno.env.get("TEST_PID_DIR")!;
Deno.writeTextFileSync(`${dir}/rank-${rank}.pid`, String(Deno.pid));
if (rank === 0) {
  initProcessGroup();
} else {
  const name = `dtrain-${Deno.env.get("DTRAIN_RUN_ID")}-a${attempt}-pg`;
  for (;;) {
    try {
      Deno.statSync(`/dev/shm/${name}`);
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  Deno.writeTextFileSync(`${dir}/segment-seen-${attempt}`, name);
  if (Deno.args[0] === "kill") Deno.kill(Deno.pid, "SIGKILL");
  Deno.exit(Number(Deno.args[0] ?? "3"));
}
