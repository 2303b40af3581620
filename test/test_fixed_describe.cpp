// fixed::describe and fixed::fusion_plan against what evaluation does: the arena's high-water mark
// of an evaluation on a fresh thread (whose arena then grows to exactly that mark) equals the plan's
// where no blocked matmul runs (its packing buffers are sized at run time) and bounds it where one
// does; every materialised node appears once, with its op and shapes.
#include <catch2/catch.hpp>

#include <string>
#include <thread>

#include "fixed_check.hpp"
#include "metagrad/fixed/describe.hpp"

using namespace metagrad::test;
using Step = fx::PlanStep;

namespace {

// The arena's high-water mark and the blocks taken from it while e is evaluated into a fresh
// tensor, on a thread of its own.
struct Arena {
  std::size_t peak = 0, blocks = 0;
};
template <class E>
Arena observed(const E& e) {
  Arena a;
  std::thread([&] {
    [[maybe_unused]] fx::TensorOf<E> t = e;
    a.peak = fx::detail::Arena::local().capacity();
    a.blocks = fx::detail::Arena::local().allocations();
  }).join();
  return a;
}

std::size_t lines_with(const fx::FusionPlan& p, Step::Role role, const std::string& text) {
  std::size_t n = 0;
  for (const Step& s : p.steps) n += s.role == role && s.what.find(text) != std::string::npos;
  return n;
}

// The plan of e, checked against an evaluation: its arena peak and temporaries equal to the
// evaluation's, or, where a blocked matmul runs (`gemm`), at most them (packing buffers come on top).
template <class E>
fx::FusionPlan checked(const E& e, bool gemm) {
  fx::FusionPlan p = fx::fusion_plan(e);
  INFO(p.str());
  REQUIRE(p.modelled);
  REQUIRE(p.packing == gemm);
  const Arena a = observed(e);
  std::size_t with_temp = 0;
  for (const Step& s : p.steps) with_temp += s.temp > 0;
  REQUIRE(with_temp == p.temporaries);
  if (gemm) {
    REQUIRE(p.arena_bytes <= a.peak);
    REQUIRE(p.temporaries <= a.blocks);
  } else {
    REQUIRE(p.arena_bytes == a.peak);
    REQUIRE(p.temporaries == a.blocks);
  }
  return p;
}
template <class E>
fx::FusionPlan exact(const E& e) {
  return checked(e, false);
}
template <class E>
fx::FusionPlan bounded(const E& e) {
  return checked(e, true);
}

// Reductions, softmax, a reshape no view expresses and pooling (overlapping or not), at one shape.
template <index_t A, index_t B, index_t C>
void reductions_and_pools(std::mt19937& rng) {
  INFO("shape (" << A << ", " << B << ", " << C << ")");
  auto x = random_tensor<float, A, B, C>(rng);
  auto y = random_tensor<float, A, B, C>(rng);
  auto fused = exact((x * y + 1.f).relu());
  CHECK(fused.count(Step::LOOP) == 1);
  CHECK(fused.count(Step::MATERIALISE) == 0);
  CHECK(fused.count(Step::READ) == 2);
  CHECK(fused.arena_bytes == 0);
  auto root = exact(x.template sum<1>(fx::keepdim));  // straight into the destination
  CHECK(root.count(Step::MATERIALISE) == 1);
  CHECK(root.arena_bytes == 0);
  auto soft = exact(x.template softmax<-1>());
  CHECK(lines_with(soft, Step::MATERIALISE, "Reduce MAX over (2,)") == 2);  // max is read twice
  CHECK(lines_with(soft, Step::MATERIALISE, "Reduce SUM over (2,)") == 1);
  exact(x.template log_softmax<0>() * y.template mean<0, 2>(fx::keepdim));
  auto split = exact(x.template permute<2, 0, 1>().template reshape<A * B * C>().exp());
  CHECK(lines_with(split, Step::INLINE, "(reads a temporary)") == (C > 1 && A * B > 1 ? 1 : 0));
  auto max = exact(fx::max_pool2d<2>(x));
  CHECK(lines_with(max, Step::MATERIALISE, "Reduce MAX over (3, 4)") == 1);
  exact(fx::avg_pool2d<3, 3, 1, 1>(x + y));
  exact(fx::max_pool2d<2, 3, 2, 1>(x.exp()).template sum<-1>());
}

}  // namespace

TEST_CASE("fixed::describe: the arena's peak is the evaluation's, with reductions and pools", "[fixed]") {
  std::mt19937 rng(7);
  reductions_and_pools<2, 4, 5>(rng);
  reductions_and_pools<3, 9, 16>(rng);
  reductions_and_pools<1, 6, 7>(rng);
  reductions_and_pools<4, 33, 65>(rng);
}

TEST_CASE("fixed::describe: a long column sum's scratch rows, on the stack or in the arena", "[fixed]") {
  std::mt19937 rng(9);
  // Each output row adds 100 input rows in halves: 4 levels of 600 columns, past the stack's 1024.
  auto x = random_tensor<float, 2, 100, 600>(rng);
  auto p = exact(x.template sum<1>(fx::keepdim));
  CHECK(lines_with(p, Step::SCRATCH, "scratch rows of the halves") == 1);
  CHECK(p.arena_bytes >= 4 * 600 * sizeof(float));
  auto q = exact(x.template sum<1, 2>(fx::keepdim));  // rows of lanes, in halves: no scratch rows
  CHECK(q.arena_bytes == 0);
}

TEST_CASE("fixed::describe: matmul operands read in place or evaluated, each with its shapes", "[fixed]") {
  std::mt19937 rng(8);
  auto x = random_tensor<float, 40, 30>(rng);  // 4.8 KB and more: the blocked GEMM, through the arena
  auto w = random_tensor<float, 30, 50>(rng);
  auto b = random_tensor<float, 50>(rng);
  auto p = bounded((fx::matmul(x, w) + b).relu());
  CHECK(p.count(Step::MATERIALISE) == 1);
  REQUIRE(lines_with(p, Step::MATERIALISE, "MatMul (40, 30) @ (30, 50) -> (40, 50)") == 1);
  CHECK(p.count(Step::IN_PLACE) == 2);
  CHECK(p.count(Step::KERNEL) == 1);
  CHECK(p.arena_bytes == 8000);  // the product's 8000 bytes, a multiple of the arena's 64
  // At the root, a product plus a bias: the bias into the destination, then the GEMM adds the product
  // in its own stores, with no temporary.
  auto lin = bounded(b + fx::matmul(x, w));
  CHECK(lines_with(lin, Step::MATERIALISE,
                   "MatMul (40, 30) @ (30, 50) -> (40, 50) [added into destination]") == 1);
  CHECK(lines_with(lin, Step::LOOP, "[into destination]") == 1);
  CHECK(lin.arena_bytes == 0);
  auto q = bounded(fx::matmul(w.transpose(), (x * 2.f).transpose()).sum());
  CHECK(lines_with(q, Step::IN_PLACE, "Move PERMUTE (1, 0): (30, 50) -> (50, 30)") == 1);
  CHECK(lines_with(q, Step::MATERIALISE, "MatMul (50, 30) @ (30, 40) -> (50, 40)") == 1);
  CHECK(lines_with(q, Step::SCRATCH, "operand evaluated in its own order: (40, 30)") == 1);
  // sum() reshapes the (1, 1) sum to a scalar: a reshape at the root, so the sum goes straight in
  CHECK(lines_with(q, Step::MATERIALISE, "Reduce SUM over (0, 1): (50, 40) -> (1, 1) [into destination]") ==
        1);

  // Small products (every operand and the result at most 4 KiB): no arena, no packing, no GEMM.
  auto xs = random_tensor<float, 4, 3>(rng);
  auto ws = random_tensor<float, 3, 5>(rng);
  auto bs = random_tensor<float, 5>(rng);
  auto s = exact((fx::matmul(xs, ws) + bs).relu());
  REQUIRE(lines_with(s, Step::MATERIALISE, "MatMul (4, 3) @ (3, 5) -> (4, 5) [on the stack]") == 1);
  CHECK(s.count(Step::IN_PLACE) == 2);
  CHECK(lines_with(s, Step::KERNEL, "small matmul") == 1);
  CHECK(s.arena_bytes == 0);
  auto sq = exact(fx::matmul(ws.transpose(), (xs * 2.f).transpose()).sum());
  CHECK(lines_with(sq, Step::IN_PLACE, "Move PERMUTE (1, 0): (3, 5) -> (5, 3)") == 1);
  CHECK(lines_with(sq, Step::SCRATCH, "operand evaluated: (3, 4) [on the stack]") == 1);
  CHECK(sq.arena_bytes == 0);
}

TEST_CASE("fixed::describe: the gradients of fixed::grad, gates and convolutions included", "[fixed]") {
  std::mt19937 rng(9);
  SECTION("two parameters of one type: each gradient skips the other's term") {
    auto a = random_tensor<float, 3, 4>(rng);
    auto c = random_tensor<float, 3, 4>(rng);
    auto g = fx::grad((a * c).exp().sum(), a, c);
    auto p0 = exact(fx::get<0>(g)), p1 = exact(fx::get<1>(g));
    CHECK(p0.count(Step::SKIPPED) == 1);
    CHECK(p1.count(Step::SKIPPED) == 1);
    CHECK(lines_with(p0, Step::INLINE, "Gate on (3, 4)") == 1);
    const std::string text = fx::describe(g);
    CHECK(text.find("gradient 0 (3, 4):\n" + p0.str()) == 0);
    CHECK(text.find("gradient 1 (3, 4):\n" + p1.str()) != std::string::npos);
    // log_softmax reads its input three times: equal copies hand their terms to the first one
    auto h = fx::grad((a * c).exp().log_softmax<-1>().sum(), a, c);
    auto q0 = exact(fx::get<0>(h));
    CHECK(q0.count(Step::SKIPPED) > 1);
    CHECK(lines_with(q0, Step::INLINE, "Gate on (3, 4)") == 1);
  }
  SECTION("an MLP layer") {
    auto x = random_tensor<float, 4, 3>(rng);
    auto w = random_tensor<float, 3, 5>(rng);
    auto b = random_tensor<float, 5>(rng);
    auto g = fx::grad((fx::matmul(x, w) + b).relu().sum(), w, b);
    auto pw = exact(fx::get<0>(g));  // small: no packing
    CHECK(lines_with(pw, Step::MATERIALISE, "MatMul (3, 4) @ (4, 5) -> (3, 5)") == 1);
    CHECK(lines_with(pw, Step::KERNEL, "small matmul") == 1);
    CHECK(lines_with(pw, Step::IN_PLACE, "Move PERMUTE (1, 0): (4, 3) -> (3, 4)") == 1);
    auto pb = exact(fx::get<1>(g));
    CHECK(lines_with(pb, Step::MATERIALISE, "Reduce SUM over (0,): (4, 5) -> (1, 5)") == 1);
  }
  SECTION("a convolution, forward and both gradients") {
    auto x = random_tensor<float, 2, 3, 8, 8>(rng);
    auto w = random_tensor<float, 4, 3, 3, 3>(rng);
    auto f = bounded(fx::conv2d<1, 1>(x, w).relu());
    CHECK(lines_with(f, Step::MATERIALISE,
                     "Conv2d stride 1 pad 1 (2, 3, 8, 8) * (4, 3, 3, 3) -> (2, 4, 8, 8)") == 1);
    CHECK(lines_with(f, Step::SCRATCH, "im2col of one image") == 1);
    auto g = fx::grad(fx::conv2d<2, 1>(x.exp(), w).relu().sum(), x, w);
    auto gx = bounded(fx::get<0>(g)), gw = bounded(fx::get<1>(g));
    CHECK(lines_with(gx, Step::MATERIALISE,
                     "Conv2dGradInput (gradient, weight) (2, 4, 4, 4), (4, 3, 3, 3) -> "
                     "(2, 3, 8, 8)") == 1);
    CHECK(lines_with(gw, Step::MATERIALISE,
                     "Conv2dGradWeight (input, gradient) (2, 3, 8, 8), (2, 4, 4, 4) -> "
                     "(4, 3, 3, 3)") == 1);
    CHECK(lines_with(gw, Step::SCRATCH, "operand evaluated: (2, 3, 8, 8)") == 1);  // x.exp() again
  }
}

TEST_CASE("fixed::describe: one line per step, indented by depth, then the arena", "[fixed]") {
  fx::Tensor<float, 4, 3> x;
  const fx::FusionPlan p = fx::fusion_plan(x.sum<1>() + 1.f);
  const std::string text = fx::describe(x.sum<1>() + 1.f);
  REQUIRE(text == p.str());
  std::size_t line = 0, at = 0;
  for (const Step& s : p.steps) {
    std::size_t end = text.find('\n', at);
    REQUIRE(end != std::string::npos);
    const std::string l = text.substr(at, end - at);
    CHECK(l.find_first_not_of(' ') == 2 * static_cast<std::size_t>(s.depth));
    CHECK(l.find(s.what) != std::string::npos);
    at = end + 1, ++line;
  }
  CHECK(text.substr(at).rfind("arena: ", 0) == 0);
  CHECK(line == p.steps.size());
  CHECK(p.steps[0].role == Step::LOOP);
  CHECK(p.steps[0].depth == 0);
}

// FusionPlan::str is defined with the type (fusion_plan.hpp), so a plan built or kept without
// describe.hpp prints too: each role's word, sizes in B, KiB and MiB to three digits (no exponents).
TEST_CASE("fixed::FusionPlan: str() names each role and prints sizes in B, KiB and MiB", "[fixed]") {
  fx::FusionPlan p;
  p.steps = {{0, Step::LOOP, "(2, 3)", 0},
             {1, Step::MATERIALISE, "MatMul (2, 4) @ (4, 3) -> (2, 3)", 512},
             {2, Step::READ, "Leaf (2, 4)", 0},
             {1, Step::SCRATCH, "scratch", 12800},
             {1, Step::KERNEL, "k", std::size_t{3} << 20}};
  p.arena_bytes = (std::size_t{12} << 20) + (std::size_t{1} << 19);
  p.temporaries = 3;
  p.packing = true;
  CHECK(p.str() ==
        "loop (2, 3)\n"
        "  materialise MatMul (2, 4) @ (4, 3) -> (2, 3) [temp 512 B]\n"
        "    read Leaf (2, 4)\n"
        "  scratch [temp 12.5 KiB]\n"
        "  kernel k [temp 3 MiB]\n"
        "arena: 3 temporaries, 12.5 MiB at peak, plus the matmul's packing buffers\n");
  p.temporaries = 1, p.packing = false, p.modelled = false, p.arena_bytes = 10239;
  CHECK(p.str().substr(p.str().rfind("arena")) ==
        "arena: 1 temporary, 10239 B at peak, plus what the unmodelled ops take\n");
}
