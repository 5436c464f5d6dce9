import assert from "node:assert/strict";
import { signalExitCode } from "../../os/exit_status.ts";

Deno.test("signalExitCode() is 128 + the signal's number, as the shell reports a killed child", () => {
  assert.equal(signalExitCode("SIGINT"), 130);
  assert.equal(signalExitCode("SIGKILL"), 137);
  assert.equal(signalExitCode("SIGTERM"), 143);
  assert.equal(signalExitCode("SIGHUP"), 129);
});
