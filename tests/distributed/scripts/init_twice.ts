/**
 * Test rank script: a second initProcessGroup() while the first group is
 * open is refused (printed as "refused: …"); currentProcessGroup() returns
 * the open one; after close() a new group can be made and works.
 */
import { currentProcessGroup, initProcessGroup } from "dtrain";

const first = initProcessGroup();
console.log(`current is first: ${currentProcessGroup() === first}`);
try {
  initProcessGroup();
  console.log("second group made");
} catch (e) {
  console.log(`refused: ${(e as Error).message}`);
}
first.close();
console.log(`after close: ${currentProcessGroup()}`);
const second = initProcessGroup();
const x = new Float32Array([second.rank + 1]);
second.allReduce(x, "sum");
console.log(`second group sums to ${x[0]}`);
// Each group its own segment name: a peer still leaving the first rendezvous unlinks the first name.
const segment = (pg: object) => "segmentName" in pg ? pg.segmentName : "(none)";
console.log(`segments differ: ${segment(first) !== segment(second)} (${segment(second)})`);
second.close();
