#pragma once
// The static-shape path: fixed::Tensor<T, Dims...>, expression types and inline evaluation.
#include "metagrad/fixed/conv2d.hpp"
#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/fixed/eval.hpp"
#include "metagrad/fixed/expr.hpp"
#include "metagrad/fixed/matmul.hpp"
#include "metagrad/fixed/movement.hpp"
#include "metagrad/fixed/nn.hpp"
#include "metagrad/fixed/reduce.hpp"
#include "metagrad/fixed/shape.hpp"
#include "metagrad/fixed/tensor.hpp"
