#pragma once
// Model state (tinygrad's nn/state.py): the StateDict protocol, get_state_dict / get_parameters /
// load_state_dict, and safetensors files.
//
// C++ has no reflection, so a model names its tensors itself: a type is a model when it has
// `nn::StateDict state_dict() const`. Tensors, StateDicts, std::optional and std::vector of models
// are models too, so a composite lists its members in one line with nn::state_dict:
//
//   struct Net {
//     nn::Linear l1{784, 128}, l2{128, 10};
//     Tensor operator()(const Tensor& x) const { return l2(l1(x).relu()); }
//     nn::StateDict state_dict() const { return nn::state_dict({{"l1", l1}, {"l2", l2}}); }
//   };
//   nn::get_state_dict(net);  // l1.weight, l1.bias, l2.weight, l2.bias, in that order
//
// A plain struct needs no state_dict(): reflected with Boost.Hana (BOOST_HANA_DEFINE_STRUCT inside
// it, or BOOST_HANA_ADAPT_STRUCT after it), it is a model whose members are its entries, each under
// its name (PyTorch's named_parameters), nested structs, std::vector and std::array of blocks dotted:
//
//   struct Block { BOOST_HANA_DEFINE_STRUCT(Block, (Tensor, w), (Tensor, b)); };
//   struct Net { BOOST_HANA_DEFINE_STRUCT(Net, (std::vector<Block>, blocks), (nn::Linear, head)); };
//   nn::state_dict(net);  // blocks.0.w, blocks.0.b, blocks.1.w, ..., head.weight, head.bias
//
// Members that are plain values (numbers, enums, strings: sizes, flags) are not state and are
// skipped; any other member must be a model. An undefined tensor (Tensor's default) has no entry,
// as PyTorch's None parameter: an optional part of a model left unset.
//
// A StateDict holds Tensor handles, so its entries alias the model's parameters: an optimizer built
// on get_parameters(net) and load_state_dict(net, ...) both change the tensors the model uses.
#include <array>
#include <boost/hana/accessors.hpp>
#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/define_struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "metagrad/detail/helpers.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad::nn {

// Named tensors in insertion order. Keys are unique; lookups are by hash.
class StateDict {
 public:
  using value_type = std::pair<std::string, Tensor>;
  StateDict() = default;
  StateDict(std::initializer_list<value_type> items) {
    for (const auto& [k, t] : items) add(k, t);
  }

  // Adds `key`; a key that is already there is an error (two members with one name).
  void add(const std::string& key, const Tensor& t);
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  const Tensor& at(const std::string& key) const;  // throws std::out_of_range naming the key
  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::vector<std::string> keys() const;

 private:
  std::vector<value_type> items_;
  std::unordered_map<std::string, std::size_t> index_;
};

// ---- the protocol ----

template <class M>
concept HasStateDict = requires(const M& m) {
  { m.state_dict() } -> std::convertible_to<StateDict>;
};
// A struct reflected with Boost.Hana that does not name its tensors itself.
template <class M>
concept ReflectedModel = boost::hana::Struct<M>::value && !HasStateDict<M>;

// Every overload first, so each can find the others for nested models.
StateDict get_state_dict(const Tensor& t, const std::string& prefix = "");
StateDict get_state_dict(const StateDict& d, const std::string& prefix = "");
template <HasStateDict M>
StateDict get_state_dict(const M& m, const std::string& prefix = "");
template <class M>
StateDict get_state_dict(const std::optional<M>& m, const std::string& prefix = "");
template <class M>
StateDict get_state_dict(const std::vector<M>& ms, const std::string& prefix = "");
template <class M, std::size_t N>
StateDict get_state_dict(const std::array<M, N>& ms, const std::string& prefix = "");
template <ReflectedModel M>
StateDict get_state_dict(const M& m, const std::string& prefix = "");

template <class M>
concept Model = requires(const M& m) {
  get_state_dict(m, std::string());
};
// A member of a reflected struct that is no state: a size, a flag, a name.
template <class V>
concept PlainValue =
    std::is_arithmetic_v<V> || std::is_enum_v<V> || std::is_convertible_v<V, std::string_view>;

template <HasStateDict M>
StateDict get_state_dict(const M& m, const std::string& prefix) {
  return get_state_dict(static_cast<StateDict>(m.state_dict()), prefix);
}
template <class M>
StateDict get_state_dict(const std::optional<M>& m, const std::string& prefix) {
  return m ? get_state_dict(*m, prefix) : StateDict{};
}
template <class M>
StateDict get_state_dict(const std::vector<M>& ms, const std::string& prefix) {
  StateDict out;
  for (std::size_t i = 0; i < ms.size(); ++i)
    for (const auto& [k, t] : get_state_dict(ms[i], detail::join_key(prefix, std::to_string(i))))
      out.add(k, t);
  return out;
}
template <class M, std::size_t N>
StateDict get_state_dict(const std::array<M, N>& ms, const std::string& prefix) {
  StateDict out;
  for (std::size_t i = 0; i < N; ++i)
    for (const auto& [k, t] : get_state_dict(ms[i], detail::join_key(prefix, std::to_string(i))))
      out.add(k, t);
  return out;
}
template <ReflectedModel M>
StateDict get_state_dict(const M& m, const std::string& prefix) {
  StateDict out;
  boost::hana::for_each(boost::hana::accessors<M>(), [&](const auto& named) {
    const auto& member = boost::hana::second(named)(m);
    using V = std::remove_cvref_t<decltype(member)>;
    static_assert(Model<V> || PlainValue<V>,
                  "nn::get_state_dict: a member of a reflected struct is neither a model (a Tensor, a layer, "
                  "a StateDict, a reflected struct, or a std::vector, std::array or std::optional of "
                  "them) nor a plain value (a number, an enum, a string)");
    if constexpr (Model<V>) {
      std::string name = boost::hana::to<const char*>(boost::hana::first(named));
      for (const auto& [k, t] : get_state_dict(member, detail::join_key(prefix, name))) out.add(k, t);
    }
  });
  return out;
}

// One member of a composite: a name and any model (a layer, a tensor, a vector of layers...).
struct Member {
  std::string name;
  StateDict dict;
  template <Model M>
  Member(std::string name_, const M& m) : name(std::move(name_)), dict(get_state_dict(m, name)) {}
};
// The members' state, each under its name: state_dict({{"l1", l1}, {"l2", l2}}). Call it qualified
// (nn::state_dict) inside a member function that is itself named state_dict.
StateDict state_dict(std::initializer_list<Member> members);
// A reflected struct's state: its members, each under its name (see the top of this file).
template <ReflectedModel M>
StateDict state_dict(const M& model) {
  return get_state_dict(model);
}

// The tensors of the state dict, in order: what an optimizer takes.
template <Model M>
std::vector<Tensor> get_parameters(const M& m) {
  std::vector<Tensor> out;
  for (const auto& [k, t] : get_state_dict(m)) out.push_back(t);
  return out;
}

// Replaces every tensor of the model with the one of the same key in `dict` (Tensor::assign, then
// realize). Shapes and dtypes must match. strict: keys the model has and `dict` lacks, and keys
// `dict` has and the model lacks, are errors; otherwise both are skipped. Everything is checked
// before anything is assigned, so a failed load leaves the model as it was.
void load_state_dict(const StateDict& model, const StateDict& dict, bool strict = true);
template <Model M>
void load_state_dict(const M& model, const StateDict& dict, bool strict = true) {
  load_state_dict(get_state_dict(model), dict, strict);
}

// ---- safetensors ----
// The format: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {...}},
// then the raw little-endian data, offsets counted from its start. Dtypes: BOOL, I8, U8, I32, I64,
// F16, F32, F64. Errors (a missing, truncated or corrupt file) are std::runtime_error naming the file.

void safe_save(const StateDict& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata = {});
StateDict safe_load(const std::string& path);  // tensors on Device::DEFAULT, in the header's order
std::map<std::string, std::string> safe_load_metadata(const std::string& path);

}  // namespace metagrad::nn
