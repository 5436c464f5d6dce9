/**
 * Test rank script: joins the Gloo group, records its pid in $TEST_PID_DIR,
 * meets the others at a barrier, then rank 0 waits for $TEST_PID_DIR/go
 * (the test creates it) while the others wait at the next barrier; then every
 * rank checks a few all-reduces and prints the backend.
 */
import { getWorld, initProcessGroup } from "dtrain";

const { rank } = getWorld();
const pidDir = Deno.env.get("TEST_PID_DIR")!;
const pg = initProcessGroup();
Deno.writeTextFileSync(`${pidDir}/rank-${rank}.pid`, String(Deno.pid));
pg.barrier("joined");
if (rank === 0) {
  for (;;) {
    try {
      Deno.statSync(`${pidDir}/go`);
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
pg.barrier("go");
for (let i = 0; i < 10; i++) {
  const buf = new Float64Array([rank + 1, i]);
  pg.allReduce(buf, "sum");
  const want = (pg.size * (pg.size + 1)) / 2;
  if (buf[0] !== want || buf[1] !== i * pg.size) {
    throw new Error(`allReduce ${i} gave ${buf[0]},${buf[1]}, expected ${want},${i * pg.size}`);
  }
}
console.log(`rank ${rank} backend ${pg.backend}`);
pg.close();
