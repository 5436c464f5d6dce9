/**
 * Test rank script for preemption: "trains" until stopped; on SIGTERM or
 * SIGINT it "saves" (writes $TEST_PID_DIR/saved-<rank> after a short delay)
 * and exits 0. With TEST_IGNORE_TERM=1 it ignores both signals.
 */
import { phase } from "../../../distributed/control/rank_runtime.ts";

const rank = Number(Deno.env.get("RANK"));
const pidDir = Deno.env.get("TEST_PID_DIR");
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(sig, async () => {
    if (Deno.env.get("TEST_IGNORE_TERM") === "1") {
      return console.error(`rank ${rank} ignores ${sig}`);
    }
    console.error(`rank ${rank} got ${sig}, saving`);
    await new Promise((r) => setTimeout(r, 300));
    Deno.writeTextFileSync(`${pidDir}/saved-${rank}`, "checkpoint");
    Deno.exit(0);
  });
}
Deno.writeTextFileSync(`${pidDir}/rank-${rank}.pid`, String(Deno.pid));
phase("training");
await new Promise(() => setInterval(() => {}, 60_000));
