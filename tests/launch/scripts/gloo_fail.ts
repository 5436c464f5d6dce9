/**
 * Test rank script for the Gloo backend: records its pid in $TEST_PID_DIR,
 * then every rank all-reduces in a loop (args: <failing rank> <iterations
 * before it fails>) until the failing rank throws, having written the time to
 * $TEST_PID_DIR/failed-at. The others are then inside a Gloo allReduce.
 */
import { getWorld, initProcessGroup } from "dtrain";

const [failRank = "2", after = "20"] = Deno.args;
const { rank } = getWorld();
const pidDir = Deno.env.get("TEST_PID_DIR");
Deno.writeTextFileSync(`${pidDir}/rank-${rank}.pid`, String(Deno.pid));
const pg = initProcessGroup();
const buf = new Float32Array(65536);
for (let i = 0;; i++) {
  if (rank === Number(failRank) && i === Number(after)) {
    Deno.writeTextFileSync(`${pidDir}/failed-at`, String(Date.now()));
    throw new Error(`rank ${rank} exploded on purpose after ${i} all-reduces`);
  }
  buf.fill(1);
  pg.allReduce(buf, "sum");
  if (buf[0] !== pg.size) throw new Error(`allReduce gave ${buf[0]}, expected ${pg.size}`);
}
