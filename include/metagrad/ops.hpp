#pragma once
// The op vocabulary (the seed's 27 ops and WHERE): seven enums and Op, which holds any one of them. It needs
// only standard headers, so every layer shares it: the static path (fixed/), the kernel AST
// (ast.hpp), codegen, the devices and the lazy graph.
#include <compare>
#include <cstdint>
#include <string>

namespace metagrad {

enum class UnaryOps : std::uint8_t { NOOP, EXP2, LOG2, CAST, SIN };
enum class BinaryOps : std::uint8_t { ADD, SUB, MUL, DIV, POW, CMPEQ, MAX };
// WHERE(c, x, y) is a select: x where c is non-zero, else y. The other branch is never read into
// the result, so an inf or NaN there cannot reach it (a blend c*x + (1-c)*y lets it through).
enum class TernaryOps : std::uint8_t { WHERE };
enum class ReduceOps : std::uint8_t { SUM, MAX };
enum class MovementOps : std::uint8_t { RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, STRIDE };
enum class FusedOps : std::uint8_t { MULACC };
enum class LoadOps : std::uint8_t { EMPTY, RAND, CONST, FROM, CONTIGUOUS, CUSTOM };

enum class OpType : std::uint8_t { Unary, Binary, Ternary, Reduce, Movement, Fused, Load };

// Any one of the seven enums; compares equal to the enum value it holds (`op == BinaryOps::ADD`).
struct Op {
  OpType type;
  std::uint8_t value;
  constexpr Op(UnaryOps o) : type(OpType::Unary), value(static_cast<std::uint8_t>(o)) {}        // NOLINT
  constexpr Op(BinaryOps o) : type(OpType::Binary), value(static_cast<std::uint8_t>(o)) {}      // NOLINT
  constexpr Op(TernaryOps o) : type(OpType::Ternary), value(static_cast<std::uint8_t>(o)) {}    // NOLINT
  constexpr Op(ReduceOps o) : type(OpType::Reduce), value(static_cast<std::uint8_t>(o)) {}      // NOLINT
  constexpr Op(MovementOps o) : type(OpType::Movement), value(static_cast<std::uint8_t>(o)) {}  // NOLINT
  constexpr Op(FusedOps o) : type(OpType::Fused), value(static_cast<std::uint8_t>(o)) {}        // NOLINT
  constexpr Op(LoadOps o) : type(OpType::Load), value(static_cast<std::uint8_t>(o)) {}          // NOLINT
  friend constexpr bool operator==(Op, Op) = default;
  friend constexpr auto operator<=>(Op, Op) = default;
};
std::string to_string(Op op);  // "BinaryOps.ADD", as the seed prints

}  // namespace metagrad
