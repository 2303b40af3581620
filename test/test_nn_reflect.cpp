// nn::state_dict of a plain struct reflected with Boost.Hana: dotted names through nested structs,
// std::vector and std::array of blocks, layers and optional parts; the entries alias the members; a
// save and load through safetensors restores every member by those names.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "metagrad/nn.hpp"

using namespace metagrad;

namespace reflect_test {

struct Block {
  BOOST_HANA_DEFINE_STRUCT(Block, (Tensor, w), (Tensor, b), (std::int64_t, stride));
};
Block block(std::int64_t n) { return {Tensor::randn({n, n}), Tensor::randn({n}), 1}; }

// A ResNet-like model: the downsampling weight is an undefined Tensor where a model has none.
struct Net {
  BOOST_HANA_DEFINE_STRUCT(Net, (std::vector<Block>, blocks), (std::array<Block, 2>, pair),
                           (nn::Linear, head), (Tensor, downsample), (std::string, name));
  Net() : blocks{block(2), block(2)}, pair{block(3), block(3)}, head(2, 3), name("net") {}
};

// A struct of the user's own, adapted from outside.
struct Plain {
  Tensor scale;
  Block inner;
};

}  // namespace reflect_test

BOOST_HANA_ADAPT_STRUCT(reflect_test::Plain, scale, inner);

namespace {

std::vector<std::string> keys(const nn::StateDict& d) { return d.keys(); }

struct TempFile {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("metagrad_test_nn_reflect_" + std::to_string(::getpid()) + ".safetensors"))
                         .string();
  ~TempFile() { std::filesystem::remove(path); }
};

}  // namespace

TEST_CASE("state dict of a Hana-reflected struct: dotted names, nesting, aliasing", "[nn]") {
  using reflect_test::Net;
  Net net;
  std::vector<std::string> want{"blocks.0.w", "blocks.0.b", "blocks.1.w", "blocks.1.b",  "pair.0.w",
                                "pair.0.b",   "pair.1.w",   "pair.1.b",   "head.weight", "head.bias"};
  REQUIRE(keys(nn::state_dict(net)) == want);
  REQUIRE(keys(nn::get_state_dict(net, "m"))[0] == "m.blocks.0.w");
  REQUIRE(nn::get_parameters(net).size() == want.size());
  REQUIRE(nn::state_dict(net).at("pair.1.w").shape() == Dims{3, 3});

  // The undefined part has no entry until it is given a tensor.
  net.downsample = Tensor::zeros({2, 2});
  REQUIRE(keys(nn::state_dict(net)).back() == "downsample");

  // Entries are the members' tensors.
  Tensor entry = nn::state_dict(net).at("blocks.1.b");
  entry.assign(Tensor({7.f, 8.f}));
  REQUIRE(net.blocks[1].b.to_vector<float>() == std::vector<float>{7.f, 8.f});

  reflect_test::Plain plain{Tensor::ones({1}), reflect_test::block(2)};
  REQUIRE(keys(nn::state_dict(plain)) == std::vector<std::string>{"scale", "inner.w", "inner.b"});
}

TEST_CASE("a Hana-reflected struct round trips through safetensors by its dotted names", "[nn]") {
  using reflect_test::Net;
  Tensor::manual_seed(7);
  Net saved;
  saved.downsample = Tensor::randn({2, 2});
  TempFile file;
  nn::safe_save(nn::state_dict(saved), file.path);
  REQUIRE(keys(nn::safe_load(file.path)) == keys(nn::state_dict(saved)));

  Net loaded;  // other random values
  loaded.downsample = Tensor::zeros({2, 2});
  REQUIRE(loaded.blocks[0].w.to_vector<float>() != saved.blocks[0].w.to_vector<float>());
  nn::load_state_dict(loaded, nn::safe_load(file.path));
  for (const auto& [k, t] : nn::state_dict(saved)) {
    INFO(k);
    REQUIRE(nn::state_dict(loaded).at(k).to_vector<float>() == t.to_vector<float>());
  }
  REQUIRE(loaded.pair[1].b.to_vector<float>() == saved.pair[1].b.to_vector<float>());

  // A model without the optional part rejects a file that has it (strict), and loads it otherwise.
  Net plain;
  REQUIRE_THROWS_WITH(nn::load_state_dict(plain, nn::safe_load(file.path)), Catch::Contains("downsample"));
  nn::load_state_dict(plain, nn::safe_load(file.path), false);
  REQUIRE(plain.head.weight.to_vector<float>() == saved.head.weight.to_vector<float>());
}
