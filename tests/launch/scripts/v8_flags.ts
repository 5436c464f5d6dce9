/**
 * Prints what V8 flags this rank runs with: its command line, how deep it can recurse (the user's
 * --stack-size shows there) and how large V8's young generation grew under a burst of garbage.
 */
import v8 from "node:v8";

const cmdline = Deno.readTextFileSync("/proc/self/cmdline").split("\0").filter((a) => a);
let depth = 0;
function down(): void {
  depth++;
  down();
}
try {
  down();
} catch { /* the stack's end */ }
let keep: { i: number }[] = [];
for (let i = 0; i < 1_000_000; i++) {
  keep.push({ i });
  if (keep.length > 2000) keep = [];
}
const newSpace = v8.getHeapSpaceStatistics().find((s) => s.space_name === "new_space")!.space_size;
console.log(`V8 ${JSON.stringify({ cmdline, depth, newSpace })}`);
