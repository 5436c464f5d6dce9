/**
 * Test rank script for RunLog: every rank logs two steps with a
 * rank-dependent loss, sample count and drawn indices (no sampler), one
 * evaluation weighted by a rank-dependent sample count, and closes; rank 0
 * prints what step() and eval() returned as one JSON line. The loop sets a
 * numerics policy at its start (no dropout), which config.json records.
 */
import { initProcessGroup, RunLog, setNumericsPolicy } from "../../../mod.ts";

setNumericsPolicy({ dropout: false }, "the test loop");
const pg = initProcessGroup();
try {
  const r = pg.rank;
  const log = new RunLog({
    config: { lr: 0.5, batchSize: 4, seed: 11 },
    processGroup: pg,
    optimizer: { lr: 0.5 },
    tensorboard: false,
  });
  const losses = [
    log.step({ loss: r + 1, samples: 4 + r, indices: Int32Array.of(10 * r, 10 * r + 1) }),
    log.step({ loss: 2 * (r + 1), samples: 4, lr: 0.25, indices: Int32Array.of(10 * r + 2) }),
  ];
  const evaluation = log.eval({ acc: r === 0 ? 1 : 0.5, loss: 3 }, { weight: r === 0 ? 30 : 10 });
  log.close();
  if (r === 0) console.log(`RESULT ${JSON.stringify({ losses, evaluation })}`);
} finally {
  pg.close();
}
