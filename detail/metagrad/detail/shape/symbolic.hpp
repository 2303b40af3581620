#pragma once
// The internals of shape/symbolic.hpp: what a Node shares. Only runtime/shape/symbolic.cpp builds
// and reads it; it names Node and NodeKind before shape/symbolic.hpp defines them.
#include <cstdint>
#include <string>
#include <vector>

namespace metagrad::symbolic {

enum class NodeKind : std::uint8_t;
class Node;

namespace detail {
// A node, simplified: its kind, bounds, constant, children and rendering.
struct NodeImpl {
  NodeKind kind;
  std::int64_t min, max;
  std::int64_t b = 0;       // Num value; Mul/Div/Mod/Lt constant
  std::vector<Node> nodes;  // Mul/Div/Mod/Lt: the single child a; Sum/And: the terms
  std::string name;         // Variable
  std::string key;          // the rendering, cached: also the identity used to merge like terms
};
}  // namespace detail

}  // namespace metagrad::symbolic
