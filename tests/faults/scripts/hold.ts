/**
 * Test rank script: records its pid and the store's port in $TEST_PID_DIR,
 * then waits until the test creates $TEST_PID_DIR/release and exits 0.
 */
const rank = Deno.env.get("RANK");
const dir = Deno.env.get("TEST_PID_DIR")!;
Deno.writeTextFileSync(`${dir}/rank-${rank}.pid`, String(Deno.pid));
Deno.writeTextFileSync(`${dir}/port`, Deno.env.get("MASTER_PORT")!);
for (;;) {
  try {
    Deno.statSync(`${dir}/release`);
    break;
  } catch {
    await new Promise((r) => setTimeout(r, 50));
  }
}
