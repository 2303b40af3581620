#pragma once
// Inline evaluation: assigning an expression to a fixed::Tensor (or fixed::eval) runs it as one fused
// loop nest the host compiler vectorises. Internal as a whole: the plan, the bound nodes and the
// loops are in detail/metagrad/detail/fixed/eval.hpp.
#include "metagrad/detail/fixed/eval.hpp"
