/**
 * Test rank script: ends normally, and only then gets stop signals — its
 * unload listener (which runs after the rank bootstrap's) removes the
 * script's own SIGTERM listener, as the runtime's teardown does, and sends
 * itself SIGTERM, SIGINT and SIGHUP. The rank must still exit 0: its script
 * was over before they came.
 */
const onStop = () => console.log("a stop signal reached the script's listener");
Deno.addSignalListener("SIGTERM", onStop);
globalThis.addEventListener("unload", () => {
  Deno.removeSignalListener("SIGTERM", onStop);
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) Deno.kill(Deno.pid, sig);
  console.log("sent itself SIGTERM, SIGINT and SIGHUP after its end");
});
console.log("script done");
