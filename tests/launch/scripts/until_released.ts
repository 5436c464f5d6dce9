/**
 * Test rank script that makes no process group: records its pid and the time it started (epoch ms,
 * $TEST_PID_DIR/started-<rank>), then runs until the test creates $TEST_PID_DIR/release, and exits 0.
 */
const rank = Number(Deno.env.get("RANK"));
const pidDir = Deno.env.get("TEST_PID_DIR");
Deno.writeTextFileSync(`${pidDir}/started-${rank}`, String(Date.now()));
Deno.writeTextFileSync(`${pidDir}/rank-${rank}.pid`, String(Deno.pid));
const released = () => {
  try {
    Deno.statSync(`${pidDir}/release`);
    return true;
  } catch {
    return false;
  }
};
// polled: the test's only way to reach this process is the file system
while (!released()) await new Promise((r) => setTimeout(r, 20));
console.log(`rank ${rank} released`);
