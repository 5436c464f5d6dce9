/**
 * Test rank script for rankZeroFirst() and storeBarrier() timeouts. Rank 0
 * prepares a file (args: <dir>) that the others then read in the same
 * section; then ranks 1.. wait 500 ms at a barrier rank 0 reaches late, and
 * print the timeout error they get.
 */
import { phase, rankZeroFirst, storeBarrier } from "../../../distributed/control/rank_runtime.ts";

const rank = Number(Deno.env.get("RANK"));
const dir = Deno.args[0]!;
const marker = `${dir}/prepared.txt`;
const seen = await rankZeroFirst("prepare dataset", async () => {
  if (rank === 0) {
    await new Promise((r) => setTimeout(r, 400));
    Deno.writeTextFileSync(marker, "ready");
  }
  return Deno.readTextFileSync(marker);
});
console.log(`rank ${rank} saw ${seen}`);

if (rank === 0) {
  phase("writing a checkpoint");
  await new Promise((r) => setTimeout(r, 1500));
} else {
  try {
    await storeBarrier("late", { timeoutMs: 500 });
    console.log(`rank ${rank} passed "late" without rank 0`);
  } catch (e) {
    console.log(`rank ${rank} barrier error: ${(e as Error).message}`);
  }
}
