#pragma once
// What every C-style dialect's prelude shares (C and OpenCL C in cstyle.cpp, CUDA C in
// cstyle_cuda.cpp), written once; each dialect spells the types its own way.
#include <string>
#include <string_view>

namespace metagrad::codegen {

// A max that keeps NaN (as PyTorch's maximum): the first line of every prelude. The NaN test
// first, then `a > b ? a : b`, which is x86's maxss exactly (gcc emits it, no branch): written
// `a > b || a != a ? a : b`, gcc branched on each comparison, and a max pool over ReLU's outputs
// (ties at 0 everywhere) mispredicted on the data.
inline constexpr const char* kMaxMacro = "#define mg_max(a,b) ((a)!=(a)?(a):(a)>(b)?(a):(b))\n";

// The integer helpers the renderers call: mg_fdiv and mg_fmod (floor division and modulo, as
// symbolic's index math means them), mg_idiv (a division that cannot trap: x / 0 is 0, and
// INT64_MIN / -1 wraps) and mg_ipow (integer powers by squaring), and uint64's mg_udiv and mg_upow. `fn`
// opens each definition
// ("static inline "), `index` is the index math's integer, `i64` and `u64` the 64-bit integers and
// `u64_zero` a zero of u64.
inline std::string integer_helpers(std::string_view fn, std::string_view index, std::string_view i64,
                                   std::string_view u64, std::string_view u64_zero) {
  std::string text =
      "$Fn$Ix mg_fdiv($Ix a, $Ix b) { $Ix q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0))); }\n"
      "$Fn$Ix mg_fmod($Ix a, $Ix b) { $Ix r = a % b; return r + ((r != 0) & ((r < 0) != (b < 0))) * b; }\n"
      "$Fn$I64 mg_idiv($I64 a, $I64 b) { return b == 0 ? 0 : b == -1 ? ($I64)($Zero - ($U64)a) : a / b; }\n"
      "$Fn$I64 mg_ipow($I64 b, $I64 e) { $U64 r = 1, x = ($U64)b; if (e < 0) return b == 1 ? 1 : b == -1 ? "
      "(e % 2 ? -1 : 1) : 0; for (; e; e >>= 1, x *= x) if (e & 1) r *= x; return ($I64)r; }\n"
      "$Fn$U64 mg_udiv($U64 a, $U64 b) { return b == 0 ? 0 : a / b; }\n"
      "$Fn$U64 mg_upow($U64 b, $U64 e) { $U64 r = 1; for (; e; e >>= 1, b *= b) if (e & 1) r *= b; return r; "
      "}\n";
  for (auto [key, value] : {std::pair<std::string_view, std::string_view>{"$Fn", fn},
                            {"$Ix", index},
                            {"$I64", i64},
                            {"$U64", u64},
                            {"$Zero", u64_zero}})
    for (std::size_t at; (at = text.find(key)) != std::string::npos;) text.replace(at, key.size(), value);
  return text;
}

}  // namespace metagrad::codegen
