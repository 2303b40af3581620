// The undefined Tensor (libtorch's): what a default-constructed Tensor is, that it can be assigned
// and held in structs and vectors, and that every kind of op given one throws std::invalid_argument
// naming the operation, never crashing on its missing data.
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "metagrad/metagrad.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;

namespace {

constexpr const char* kUndefined = ": the tensor is undefined (default-constructed)";

// f must throw std::invalid_argument saying the tensor is undefined; with `op`, the message starts
// with it (the operation that met the undefined tensor).
void require_undefined(const std::string& what, const std::function<void()>& f, const std::string& op = "") {
  INFO(what);
  try {
    f();
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    INFO(m);
    CHECK_THAT(m, Contains(kUndefined));
    if (!op.empty()) CHECK(m.rfind(op + kUndefined, 0) == 0);
    return;
  }
  FAIL("no std::invalid_argument");
}

struct Block {
  Tensor w, b;
};

}  // namespace

TEST_CASE("undefined tensor: default construction, assignment, structs and vectors", "[undefined]") {
  Tensor t;
  Tensor braces{};
  REQUIRE(!t.defined());
  REQUIRE(!braces.defined());
  REQUIRE(Tensor::ones({2}).defined());

  Block blk{};  // value-initialized, filled later
  REQUIRE((!blk.w.defined() && !blk.b.defined()));
  blk.w = Tensor({1.f, 2.f});
  blk.b = Tensor::full({2}, 3);
  REQUIRE((blk.w.defined() && blk.b.defined()));
  REQUIRE((blk.w + blk.b).to_vector<float>() == std::vector<float>{4.f, 5.f});

  std::vector<Tensor> v(3);
  for (const Tensor& x : v) REQUIRE(!x.defined());
  v[1] = Tensor::arange(4);
  REQUIRE(!v[0].defined());  // each element is its own handle
  REQUIRE(v[1].sum().item<float>() == 6.f);
  v.resize(5);
  REQUIRE(!v[4].defined());

  // A handle: assigning rebinds this handle alone, as a Python name (copies keep what they had).
  Tensor a;
  Tensor b = a;
  a = Tensor::ones({2});
  REQUIRE(a.defined());
  REQUIRE(!b.defined());
  b = std::move(a);
  REQUIRE(b.defined());

  // A struct member assigned from an op's result trains like any tensor.
  Block fit{};
  fit.w = Tensor({2.f, -1.f}, {.requires_grad = true});
  (fit.w * fit.w).sum().backward();
  REQUIRE(fit.w.grad->to_vector<float>() == std::vector<float>{4.f, -2.f});
  REQUIRE(!t.grad);

  // Printing says what it is instead of throwing.
  REQUIRE(to_string(t) == "<Tensor undefined>");
  std::ostringstream os;
  os << t;
  REQUIRE(os.str() == "tensor(undefined)");
}

TEST_CASE("undefined tensor: every kind of op throws, naming the operation", "[undefined]") {
  Tensor u;
  Tensor x = Tensor::ones({2, 2});
  Tensor i = Tensor(std::vector<std::int64_t>{0, 1}, {2});

  // Properties and data: the method is named.
  require_undefined("shape", [&] { (void)u.shape(); });
  require_undefined(
      "item", [&] { (void)u.item<float>(); }, "Tensor.item");
  require_undefined(
      "to_vector (numpy)", [&] { (void)u.to_vector<float>(); }, "Tensor.to_vector");
  require_undefined(
      "realize", [&] { u.realize(); }, "realize");
  require_undefined(
      "backward", [&] { u.backward(); }, "backward");
  require_undefined(
      "detach", [&] { (void)u.detach(); }, "detach");
  require_undefined(
      "to", [&] { (void)u.to("CPU"); }, "to");
  require_undefined(
      "requires_grad_", [&] { u.requires_grad_(); }, "requires_grad_");
  require_undefined(
      "assign to", [&] { u.assign(x); }, "assign");
  require_undefined(
      "assign from", [&] { x.assign(u); }, "assign");
  require_undefined("numel", [&] { (void)u.numel(); });
  require_undefined(
      "lazydata", [&] { (void)u.lazydata->shape(); }, "Tensor.lazydata");

  // Unary: straight to an mlop (named by it) or through checks of the argument (named by the method).
  require_undefined(
      "relu", [&] { (void)u.relu(); }, "mlops::Relu");
  require_undefined(
      "sigmoid", [&] { (void)u.sigmoid(); }, "sigmoid");
  require_undefined(
      "exp", [&] { (void)u.exp(); }, "exp");
  require_undefined("neg", [&] { (void)(-u); });
  require_undefined(
      "cast", [&] { (void)u.cast(dtypes::int32); }, "cast");
  require_undefined(
      "contiguous", [&] { (void)u.contiguous(); }, "mlops::Contiguous");

  // Binary, with either side undefined, and with scalars (named by the broadcast or scalar that meets
  // the undefined operand first).
  require_undefined("u + x", [&] { (void)(u + x); });
  require_undefined("x + u", [&] { (void)(x + u); });
  require_undefined("x * u", [&] { (void)x.mul(u); });
  require_undefined("u * 2", [&] { (void)(u * 2.0); });
  require_undefined("2 - u", [&] { (void)(2 - u); });
  require_undefined("x < u", [&] { (void)(x < u); });
  require_undefined("where", [&] { (void)(x > 0).where(u, x); });
  require_undefined("maximum", [&] { (void)x.maximum(u); });

  // Reductions and movement.
  require_undefined(
      "sum", [&] { (void)u.sum(); }, "sum");
  require_undefined(
      "max", [&] { (void)u.max(0); }, "max");
  require_undefined(
      "mean", [&] { (void)u.mean(); }, "mean");
  require_undefined(
      "softmax", [&] { (void)u.softmax(); }, "softmax");
  require_undefined(
      "argmax", [&] { (void)u.argmax(); }, "argmax");
  require_undefined(
      "reshape", [&] { (void)u.reshape({4}); }, "reshape");
  require_undefined(
      "permute",
      [&] {
        (void)u.permute({1, 0});
      },
      "permute");
  require_undefined("expand", [&] { (void)u.expand({2, 2}); });
  require_undefined("transpose", [&] { (void)u.transpose(); });
  require_undefined(
      "subscript", [&] { (void)u[0]; }, "operator[]");
  require_undefined("index by undefined", [&] { (void)x[{u}]; });
  require_undefined(
      "cat", [&] { (void)x.cat({u}); }, "cat");
  require_undefined(
      "stack",
      [&] {
        (void)Tensor::stack({x, u});
      },
      "stack");
  require_undefined("pad", [&] { (void)u.pad({{1, 1}}); });
  require_undefined("gather", [&] { (void)x.gather(0, u); });
  require_undefined("index_select", [&] { (void)u.index_select(0, i); });
  require_undefined("index_put_", [&] { u.index_put_({0}, x); });

  // Processing and losses.
  require_undefined(
      "matmul", [&] { (void)u.matmul(x); }, "matmul");
  require_undefined(
      "matmul by", [&] { (void)x.matmul(u); }, "matmul");
  require_undefined(
      "linear", [&] { (void)x.linear(u); }, "linear");
  require_undefined(
      "conv2d weight",
      [&] {
        (void)Tensor::ones({1, 1, 4, 4}).conv2d(u);
      },
      "conv2d");
  require_undefined("layernorm", [&] { (void)u.layernorm(); });
  require_undefined(
      "cross_entropy", [&] { (void)x.cross_entropy(u); }, "cross_entropy");
  require_undefined("zeros_like", [&] { (void)Tensor::zeros_like(u); });

  // Autograd: an undefined operand of a graph that requires grad, and a layer given one.
  Tensor w = Tensor({1.f, 2.f}, {.requires_grad = true});
  require_undefined("graph", [&] { (w * u).sum().backward(); });
  nn::Linear lin(2, 2);
  require_undefined("layer", [&] { (void)lin(u); });
  lin.weight = Tensor();
  require_undefined("layer weight", [&] { (void)lin(x); });
}
