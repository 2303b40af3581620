// ONNX Runtime's side of bench/bench_onnx: one model, one input of the given shape and dtype (float32:
// uniform in [-1, 1); int64: tokens below 96), intra-op threads as given and one inter-op thread.
//   node bench/ort_bench.js MODEL SHAPE DTYPE THREADS REPS      (SHAPE: 1x3x224x224, DTYPE: float32|int64)
// Finds onnxruntime-node through ORT_NODE (its folder) or Node's usual search. Prints
//   session_ms S         the session's creation (load and graph optimisation)
//   first_ms F           the first run
//   run_ms R1 R2 ...     each timed run, after two warm-up runs
//   cpu_ms C1 C2 ...     each timed run's process CPU time (user + system, all threads)
const ort = require(process.env.ORT_NODE || 'onnxruntime-node');

async function main() {
  const [model, shapeText, dtype, threads, reps] = process.argv.slice(2);
  if (!reps) throw new Error('usage: node ort_bench.js MODEL SHAPE DTYPE THREADS REPS');
  let t0 = process.hrtime.bigint();
  const ms = () => Number(process.hrtime.bigint() - t0) / 1e6;
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all'});
  console.log(`session_ms ${ms().toFixed(3)}`);
  const shape = shapeText.split('x').map(Number);
  const size = shape.reduce((a, b) => a * b, 1);
  const data = dtype === 'int64' ? BigInt64Array.from({length: size}, () => BigInt(Math.floor(Math.random() * 96)))
                                  : Float32Array.from({length: size}, () => Math.random() * 2 - 1);
  const feed = {[session.inputNames[0]]: new ort.Tensor(dtype, data, shape)};
  t0 = process.hrtime.bigint();
  await session.run(feed);
  console.log(`first_ms ${ms().toFixed(3)}`);
  await session.run(feed);
  const times = [], cpu = [];
  for (let i = 0; i < Number(reps); ++i) {
    const c0 = process.cpuUsage();
    t0 = process.hrtime.bigint();
    await session.run(feed);
    times.push(ms().toFixed(3));
    const c = process.cpuUsage(c0);
    cpu.push(((c.user + c.system) / 1e3).toFixed(3));
  }
  console.log(`run_ms ${times.join(' ')}`);
  console.log(`cpu_ms ${cpu.join(' ')}`);
}

main().catch((e) => { console.error(`ort_bench: ${e.message}`); process.exit(1); });
