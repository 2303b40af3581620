// fx::TensorMap (fixed/tensor_map.hpp): a view of user memory that copies nothing. Its expression
// reads the user's buffer and assigning to it writes there (addresses checked), from a pointer, a
// std::span of static extent and a Tensor; results equal a Tensor's; a const map only reads; a
// loss over mapped inputs differentiates as over tensors.
#include <catch2/catch.hpp>

#include <array>
#include <random>
#include <span>
#include <type_traits>

#include "fixed_check.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/tensor_map.hpp"

namespace fx = metagrad::fixed;
using fx::index_t;
using metagrad::test::random_tensor;

TEST_CASE("fixed map: a TensorMap reads and writes user memory in place", "[fixed][map]") {
  std::mt19937 rng(1);
  auto a = random_tensor<float, 3, 4>(rng);
  auto b = random_tensor<float, 4, 2>(rng);
  alignas(64) std::array<float, 12> user{};
  std::copy(a.begin(), a.end(), user.begin());
  fx::TensorMap<float, 3, 4> m(user.data());
  REQUIRE(m.data() == user.data());
  REQUIRE(m.expr().op.data == user.data());  // the leaf points at the user's buffer: nothing copied

  std::array<float, 6> out{};
  fx::TensorMap<float, 3, 2> o(out.data());
  o = fx::matmul(m, b) + 1.f;  // evaluated straight into the user's memory
  fx::Tensor<float, 3, 2> want = fx::matmul(a, b) + 1.f;
  REQUIRE(o.data() == out.data());
  for (index_t i = 0; i < 6; ++i) REQUIRE(out[std::size_t(i)] == want[i]);

  m *= 2.f;  // in place, through the map
  for (index_t i = 0; i < 12; ++i) REQUIRE(user[std::size_t(i)] == 2 * a[i]);
  m = m.transpose().transpose() - a;  // reads its own memory while writing it: as a Tensor would
  for (index_t i = 0; i < 12; ++i) REQUIRE(user[std::size_t(i)] == Approx(a[i]));

  std::span<float, 12> s(user);
  fx::TensorMap<float, 3, 4> from_span = s;
  REQUIRE(from_span.data() == user.data());
  fx::TensorMap<float, 3, 4> of_tensor = a;
  REQUIRE(of_tensor.data() == a.data());
  fx::TensorMap<const float, 3, 4> ro(std::as_const(a));
  static_assert(!std::is_assignable_v<fx::TensorMap<const float, 3, 4>&, fx::Tensor<float, 3, 4>>);
  REQUIRE(fx::eval(ro.sum())[0] == Approx(fx::eval(a.sum())[0]));
}

TEST_CASE("fixed map: fx::grad of a loss over mapped inputs writes gradients into user memory",
          "[fixed][map]") {
  std::mt19937 rng(2);
  auto w = random_tensor<double, 3, 3>(rng);
  std::array<double, 6> xs{1, -2, 3, 0.5, 4, -1};
  std::array<double, 9> gbuf{};
  fx::TensorMap<double, 2, 3> x(xs.data());
  fx::Tensor<double, 3, 3> gw;
  fx::grad_into(std::tie(gw), fx::matmul(x, w).square().sum(), w);
  fx::TensorMap<double, 3, 3> g(gbuf.data());
  g = gw;
  fx::Tensor<double, 2, 3> xt = x;
  fx::Tensor<double, 3, 3> want = fx::matmul(xt.transpose(), 2.0 * fx::matmul(xt, w));
  for (index_t i = 0; i < 9; ++i) REQUIRE(gbuf[std::size_t(i)] == Approx(want[i]));
}

#if defined(__cpp_lib_mdspan)  // g++ 12 and clang++-14's libraries have none: compiled where one does
TEST_CASE("fixed map: a TensorMap over a std::mdspan of static extents", "[fixed][map]") {
  std::array<float, 6> buf{1, 2, 3, 4, 5, 6};
  std::mdspan<float, std::extents<std::size_t, 2, 3>> s(buf.data());
  fx::TensorMap<float, 2, 3> m = s;
  REQUIRE(m.data() == buf.data());
  m *= 2.f;
  REQUIRE(buf[4] == 10);
}
#endif

// ---- Eigen (fixed/eigen.hpp): views both ways, addresses checked ----
#if __has_include(<Eigen/Core>)
#include "metagrad/fixed/eigen.hpp"

TEST_CASE("fixed map: Eigen matrices and maps viewed as tensors and back, nothing copied",
          "[fixed][map][eigen]") {
  std::mt19937 rng(3);
  using RM34 = Eigen::Matrix<float, 3, 4, Eigen::RowMajor>;
  RM34 m = RM34::Random();
  auto t = fx::from_eigen(m);
  static_assert(std::is_same_v<decltype(t), fx::TensorMap<float, 3, 4>>);
  REQUIRE(t.data() == m.data());
  REQUIRE(t.expr().op.data == m.data());
  auto b = random_tensor<float, 4, 2>(rng);
  Eigen::Matrix<float, 3, 2, Eigen::RowMajor> out;
  fx::from_eigen(out) = fx::matmul(t, b);  // evaluated into Eigen's memory
  Eigen::Matrix<float, 3, 2, Eigen::RowMajor> want = m * fx::to_eigen(b);
  REQUIRE(out.isApprox(want, 1e-5f));
  for (index_t i = 0; i < 12; ++i) REQUIRE(t[i] == m.data()[i]);
  REQUIRE(t[1 * 4 + 2] == m(1, 2));  // same element order

  // Another shape of the same count, and a const matrix reads only.
  auto flat = fx::from_eigen<12>(m);
  REQUIRE(flat.data() == m.data());
  const RM34& cm = m;
  auto ro = fx::from_eigen(cm);
  static_assert(std::is_same_v<decltype(ro), fx::TensorMap<const float, 3, 4>>);
  REQUIRE(ro.data() == m.data());

  // An Eigen::Map of user memory, and a dynamic-size one checked at run time.
  std::array<double, 6> buf{1, 2, 3, 4, 5, 6};
  Eigen::Map<Eigen::Matrix<double, 2, 3, Eigen::RowMajor>> em(buf.data());
  auto te = fx::from_eigen(em);
  REQUIRE(te.data() == buf.data());
  te *= 2.0;
  REQUIRE(buf[5] == 12);
  Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> dyn(buf.data(), 2, 3);
  REQUIRE(fx::from_eigen<3, 2>(dyn).data() == buf.data());
  REQUIRE_THROWS_WITH(
      (fx::from_eigen<4, 2>(dyn)),
      "fixed::from_eigen: an Eigen object (2, 3) viewed as (4, 2): the element counts differ");
  Eigen::Matrix<float, 4, 4, Eigen::RowMajor> big = Eigen::Matrix<float, 4, 4, Eigen::RowMajor>::Zero();
  REQUIRE_THROWS_WITH((fx::from_eigen<2, 2>(big.block<2, 2>(1, 1))),
                      Catch::Contains("(2, 2) is strided (a block or a strided Map)"));

  // Vectors (either storage order) and column-major matrices, read as their transpose.
  Eigen::Vector3f v(1, 2, 3);
  REQUIRE(fx::from_eigen(v).data() == v.data());
  static_assert(std::is_same_v<decltype(fx::from_eigen(v)), fx::TensorMap<float, 3, 1>>);
  Eigen::Matrix<float, 2, 3> cmaj;  // column-major
  cmaj << 1, 2, 3, 4, 5, 6;
  auto tr = fx::from_eigen_transposed(cmaj);
  static_assert(std::is_same_v<decltype(tr), fx::TensorMap<float, 3, 2>>);
  REQUIRE(tr.data() == cmaj.data());
  fx::Tensor<float, 2, 3> back = tr.transpose();
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j) REQUIRE(back(i, j) == cmaj(i, j));

  // Tensors (in-object and heap) as Eigen::Maps: writes land in the tensor.
  fx::Tensor<float, 3, 3> small = random_tensor<float, 3, 3>(rng);
  auto es = fx::to_eigen(small);
  static_assert(std::is_same_v<decltype(es), Eigen::Map<Eigen::Matrix<float, 3, 3, Eigen::RowMajor>>>);
  REQUIRE(es.data() == small.data());
  REQUIRE(es(2, 1) == small(2, 1));
  es(2, 1) = 42;
  REQUIRE(small(2, 1) == 42);
  auto heap = random_tensor<double, 40, 30>(rng);
  auto eh = fx::to_eigen(heap);
  REQUIRE(eh.data() == heap.data());
  REQUIRE(eh.rows() == 40);
  REQUIRE(eh(7, 11) == heap(7, 11));
  auto vec = random_tensor<float, 5>(rng);
  static_assert(std::is_same_v<decltype(fx::to_eigen(vec)), Eigen::Map<Eigen::Matrix<float, 5, 1>>>);
  REQUIRE(fx::to_eigen(std::as_const(vec)).data() == vec.data());
  static_assert(std::is_same_v<decltype(fx::to_eigen(std::as_const(vec))),
                               Eigen::Map<const Eigen::Matrix<float, 5, 1>>>);
  fx::TensorMap<float, 3, 4> tm(m.data());
  REQUIRE(fx::to_eigen(tm).data() == m.data());
  // The round trip: Eigen -> fx -> Eigen, one address throughout.
  REQUIRE(fx::to_eigen(fx::from_eigen(m)).data() == m.data());
}
#endif

// ---- fx::save / fx::load (nn/fixed_state.hpp): safetensors, through the dynamic path's reader ----
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "metagrad/nn/fixed_state.hpp"

TEST_CASE("fixed save and load: a round trip through safetensors, checked names, shapes and dtypes",
          "[fixed][map][safetensors]") {
  std::mt19937 rng(4);
  auto path =
      (std::filesystem::temp_directory_path() / ("fx_save_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  auto w = random_tensor<float, 3, 4>(rng);
  auto big = random_tensor<double, 50, 40>(rng);
  fx::Tensor<std::int32_t, 2> n{7, -9};
  std::array<float, 6> user{1, 2, 3, 4, 5, 6};
  fx::TensorMap<float, 2, 3> um(user.data());
  fx::save(path, fx::named("w", std::as_const(w)), fx::named("big", big), fx::named("n", n),
           fx::named("user", um));

  fx::Tensor<float, 3, 4> w2;
  fx::Tensor<double, 50, 40> big2;
  fx::Tensor<std::int32_t, 2> n2;
  std::array<float, 6> user2{};
  fx::TensorMap<float, 2, 3> um2(user2.data());
  fx::load(path, fx::named("user", um2), fx::named("w", w2), fx::named("n", n2), fx::named("big", big2));
  for (index_t i = 0; i < w.size; ++i) REQUIRE(w2[i] == w[i]);
  for (index_t i = 0; i < big.size; ++i) REQUIRE(big2[i] == big[i]);
  REQUIRE((n2[0] == 7 && n2[1] == -9));
  REQUIRE(user2 == user);
  // The dynamic path reads the same file.
  auto dict = metagrad::nn::safe_load(path);
  REQUIRE(dict.at("w").shape() == metagrad::Dims{3, 4});
  REQUIRE(dict.at("w").to_vector<float>()[5] == w[5]);

  // A wrong shape, a missing name, a wrong dtype: errors naming file, tensor and shapes; nothing written.
  fx::Tensor<float, 4, 3> wrong;
  wrong[0] = 5;
  REQUIRE_THROWS_WITH(fx::load(path, fx::named("w2", w2), fx::named("w", wrong)),
                      Catch::Contains("tensor 'w2' is not in the file (it has: w, big, n, user)"));
  REQUIRE_THROWS_WITH(
      fx::load(path, fx::named("n", n2), fx::named("w", wrong)),
      "fixed::load '" + path + "': tensor 'w' is (3, 4) in the file, the fixed::Tensor is (4, 3)");
  n2[0] = 0;
  fx::Tensor<double, 3, 4> wd;
  REQUIRE_THROWS_WITH(fx::load(path, fx::named("n", n2), fx::named("w", wd)),
                      Catch::Contains("tensor 'w' is float32 in the file, the fixed::Tensor's float64"));
  REQUIRE((n2[0] == 0 && wrong[0] == 5));  // checked before anything was written
  std::filesystem::remove(path);
}

// A whole static model (fixed/model.hpp): each tensor under its dotted name.
namespace saved {
using W = fx::Tensor<float, 3, 4>;
using B = fx::Tensor<float, 4>;
struct Linear {
  BOOST_HANA_DEFINE_STRUCT(Linear, (W, weight), (B, bias));
};
struct Attention {
  BOOST_HANA_DEFINE_STRUCT(Attention, (Linear, w), (double, scale));  // a plain value: not saved
};
struct Block {
  BOOST_HANA_DEFINE_STRUCT(Block, (Attention, attn), (B, ln));
};
struct Net {
  using Blocks = std::array<Block, 2>;
  using Ids = fx::Tensor<std::int32_t, 2>;
  BOOST_HANA_DEFINE_STRUCT(Net, (Blocks, blocks), (Ids, ids));
};
// One of Net's tensors (ids) and a name Net's file lacks.
struct Other {
  using Bad = fx::Tensor<float, 5>;
  BOOST_HANA_DEFINE_STRUCT(Other, (Net::Ids, ids), (Bad, blocks));
};
}  // namespace saved

TEST_CASE("fixed save and load of a reflected model: dotted names, a round trip, checked first",
          "[fixed][map][safetensors][model]") {
  std::mt19937 rng(5);
  auto path =
      (std::filesystem::temp_directory_path() / ("fx_model_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  auto net = std::make_unique<saved::Net>();
  fx::for_each_param(
      [&](auto& t) {
        for (auto& v : t)
          v = static_cast<std::remove_cvref_t<decltype(v)>>(
                  std::uniform_int_distribution<int>(-99, 99)(rng)) /
              8;
      },
      *net);
  fx::save(path, *net);
  auto dict = metagrad::nn::safe_load(path);
  REQUIRE(dict.keys() == std::vector<std::string>{"blocks.0.attn.w.weight", "blocks.0.attn.w.bias",
                                                  "blocks.0.ln", "blocks.1.attn.w.weight",
                                                  "blocks.1.attn.w.bias", "blocks.1.ln", "ids"});
  REQUIRE(dict.at("blocks.1.attn.w.weight").shape() == metagrad::Dims{3, 4});
  REQUIRE(dict.at("blocks.1.attn.w.weight").to_vector<float>()[7] == net->blocks[1].attn.w.weight[7]);

  auto back = std::make_unique<saved::Net>();
  fx::load(path, *back);
  fx::for_each_named(
      [&](const std::string& name, const auto& got, const auto& want) {
        INFO(name);
        for (index_t i = 0; i < got.size; ++i) REQUIRE(got[i] == want[i]);
      },
      *back, *net);

  // A model the file does not fit: an error naming the tensor, and nothing written (ids, checked
  // and fitting, keeps its value).
  saved::Other other{};
  other.ids[0] = 42;
  REQUIRE_THROWS_WITH(fx::load(path, other), Catch::Contains("tensor 'blocks' is not in the file"));
  REQUIRE(other.ids[0] == 42);
  std::filesystem::remove(path);
}
