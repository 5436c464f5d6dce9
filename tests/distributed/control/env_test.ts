/**
 * The environment contract (distributed/control/env.ts): what the launcher writes
 * reads back as the same world, a process outside a launcher is a world of
 * one, and inconsistent values are errors that name the variables.
 */
import assert from "node:assert/strict";
import {
  ENV,
  getRankSettings,
  getWorld,
  launcherPid,
  rankEnv,
  storeToken,
  type World,
} from "../../../distributed/control/env.ts";

const lookup = (vars: Record<string, string>) => (name: string) => vars[name];

const world: World = {
  rank: 5,
  localRank: 1,
  worldSize: 8,
  localWorldSize: 4,
  groupRank: 1,
  nnodes: 2,
  masterAddr: "10.0.0.1",
  masterPort: 29500,
  runId: "20251129-093000-train-3fa2",
  runDir: "/runs/x",
  isLauncher: true,
};
const input = {
  world,
  storeToken: "secret-token-0123456789",
  numThreads: 4,
  hangWarnS: 60,
  timeoutS: 1800,
  restartCount: 2,
  logRanks: "all",
  launcherPid: 1234,
};
const launched = rankEnv(input);

Deno.test("rankEnv() sets the torchrun variables and getWorld() reads them back", () => {
  assert.equal(launched.RANK, "5");
  assert.equal(launched.LOCAL_RANK, "1");
  assert.equal(launched.WORLD_SIZE, "8");
  assert.equal(launched.LOCAL_WORLD_SIZE, "4");
  assert.equal(launched.GROUP_RANK, "1");
  assert.equal(launched.MASTER_ADDR, "10.0.0.1");
  assert.equal(launched.MASTER_PORT, "29500");
  assert.deepEqual(getWorld(lookup(launched)), world);
  assert.deepEqual(getRankSettings(lookup(launched)), {
    numThreads: 4,
    hangWarnS: 60,
    timeoutS: 1800,
    restartCount: 2,
    logRanks: "all",
    resume: null,
    allowConfigChange: false,
  });
  assert.equal(
    getRankSettings(lookup(rankEnv({ ...input, resume: "/runs/a" }))).resume,
    "/runs/a",
  );
  assert.equal(
    getRankSettings(lookup(rankEnv({ ...input, allowConfigChange: true }))).allowConfigChange,
    true,
  );
  assert.equal(storeToken(lookup(launched)), "secret-token-0123456789");
  assert.equal(launcherPid(lookup(launched)), 1234);
  assert.ok(!("OMP_NUM_THREADS" in launched), "OMP_NUM_THREADS is the user's");
});

Deno.test("getWorld() outside a launcher is a world of one", () => {
  const w = getWorld(lookup({}));
  assert.deepEqual(w, {
    rank: 0,
    localRank: 0,
    worldSize: 1,
    localWorldSize: 1,
    groupRank: 0,
    nnodes: 1,
    masterAddr: "127.0.0.1",
    masterPort: 0,
    runId: "",
    runDir: null,
    isLauncher: false,
  });
  assert.equal(storeToken(lookup({})), null);
  assert.equal(getRankSettings(lookup({})).restartCount, 0);
  // torchrun-style variables without DTRAIN_*: one node holding every rank.
  const torchrun = getWorld(lookup({ RANK: "3", WORLD_SIZE: "4" }));
  assert.equal(torchrun.localWorldSize, 4);
  assert.equal(torchrun.localRank, 3);
  assert.equal(torchrun.isLauncher, false);
});

Deno.test("getWorld() names the variables of an inconsistent environment", () => {
  const bad = (changes: Record<string, string | undefined>, message: RegExp) => {
    const vars = { ...launched, ...changes } as Record<string, string>;
    for (const [k, v] of Object.entries(changes)) if (v === undefined) delete vars[k];
    assert.throws(() => getWorld(lookup(vars)), message, JSON.stringify(changes));
  };
  bad({ RANK: "8" }, /RANK=8 is not below WORLD_SIZE=8/);
  bad({ RANK: "x" }, /Invalid environment variable RANK="x": expected an integer >= 0/);
  bad({ WORLD_SIZE: "0" }, /Invalid environment variable WORLD_SIZE="0": expected an integer >= 1/);
  bad({ LOCAL_RANK: "4" }, /LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4/);
  bad({ GROUP_RANK: "2" }, /GROUP_RANK=2 is not below DTRAIN_NNODES=2/);
  bad({ WORLD_SIZE: "6", RANK: "5" }, /WORLD_SIZE=6 != DTRAIN_NNODES=2 × LOCAL_WORLD_SIZE=4/);
  bad({ RANK: "4" }, /RANK=4 != GROUP_RANK=1 × LOCAL_WORLD_SIZE=4 \+ LOCAL_RANK=1/);
  bad({ MASTER_PORT: "0" }, /MASTER_PORT is unset or 0 inside a dtrain launch/);
  bad({ MASTER_PORT: "70000" }, /MASTER_PORT=70000 is not a TCP port/);
  bad({ WORLD_SIZE: undefined }, /RANK is set but WORLD_SIZE is not/);
  assert.throws(
    () => getRankSettings(lookup({ [ENV.TIMEOUT]: "-1" })),
    /DTRAIN_TIMEOUT="-1": expected a number of seconds > 0/,
  );
});
