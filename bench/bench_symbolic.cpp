// Cost of the index algebra: build and simplify the index expression of a 5-op movement sequence
// on a 4-D shape, then render it. No target yet; it is the figure later work must not regress.
#include <benchmark/benchmark.h>

#include <metagrad/metagrad.hpp>

using namespace metagrad;

// permute, pad, reshape (two views), shrink, flip: a typical conv-style chain that keeps 2 views.
static ShapeTracker movement_sequence() {
  ShapeTracker st({8, 16, 32, 32});
  st.permute({0, 2, 3, 1});
  st.pad({{0, 0}, {1, 1}, {1, 1}, {0, 0}});
  st.reshape({8, 34 * 34, 16});
  st.shrink({{0, 8}, {0, 1000}, {0, 16}});
  st.stride({1, -1, 1});
  return st;
}

static void BM_MovementOps(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(movement_sequence());
}
BENCHMARK(BM_MovementOps);

static void BM_ExprIdxs(benchmark::State& state) {
  ShapeTracker st = movement_sequence();
  for (auto _ : state) benchmark::DoNotOptimize(st.expr_idxs());
  auto [idx, valid] = st.expr_idxs();
  state.SetLabel(std::to_string(st.views().size()) + " views, " + std::to_string(idx.render().size()) +
                 "-char index");
}
BENCHMARK(BM_ExprIdxs);

static void BM_BuildSimplifyRender(benchmark::State& state) {
  for (auto _ : state) {
    auto [idx, valid] = movement_sequence().expr_idxs();
    benchmark::DoNotOptimize(idx.render().size() + valid.render().size());
  }
}
BENCHMARK(BM_BuildSimplifyRender);

// Rendering alone, from an already simplified expression: a fresh copy of each node's string.
static void BM_Render(benchmark::State& state) {
  auto [idx, valid] = movement_sequence().expr_idxs();
  for (auto _ : state) {
    std::string s = idx.render() + valid.render();
    benchmark::DoNotOptimize(s.data());
  }
}
BENCHMARK(BM_Render);

BENCHMARK_MAIN();
