#pragma once
// The static-shape path, all of it: fixed::Tensor<T, Dims...> and TensorMap (user memory), expression
// types and inline evaluation, type-level gradients (fx::grad, fx::grad_into) and the cuts that keep
// their compile cost linear (fx::cut, fx::Tape), the CNN ops and pooling, a transformer's pieces, the
// MLP training step, static models as reflected structs and their optimizers (fx::for_each_param,
// fx::AdamW), the thread-pool controls (fx::set_threads) and fx::describe (an expression's
// fusion plan). Header-only: link metagrad::headers.
// First the headers a shape error points into: the compiler's include chain above it is then short.
#include "metagrad/fixed/shape.hpp"

#include "metagrad/detail/fixed/elementwise.hpp"

#include "metagrad/detail/fixed/reduce.hpp"
#include "metagrad/fixed/tensor.hpp"

#include "metagrad/fixed/matmul.hpp"

#include "metagrad/fixed/conv2d.hpp"
#include "metagrad/fixed/pool.hpp"

#include "metagrad/fixed/assign.hpp"
#include "metagrad/fixed/bitcast.hpp"
#include "metagrad/fixed/cut.hpp"
#include "metagrad/fixed/describe.hpp"
#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/fixed/eval.hpp"
#include "metagrad/fixed/expr.hpp"
#include "metagrad/fixed/fusion_plan.hpp"
#include "metagrad/fixed/grad.hpp"
#include "metagrad/fixed/math.hpp"
#include "metagrad/fixed/matmul.hpp"
#include "metagrad/fixed/mlp.hpp"
#include "metagrad/fixed/model.hpp"
#include "metagrad/fixed/movement.hpp"
#include "metagrad/fixed/nn.hpp"
#include "metagrad/fixed/optim.hpp"
#include "metagrad/fixed/parallel.hpp"
#include "metagrad/fixed/pool.hpp"
#include "metagrad/fixed/reduce.hpp"
#include "metagrad/fixed/shape.hpp"
#include "metagrad/fixed/tensor.hpp"
#include "metagrad/fixed/tensor_map.hpp"
#include "metagrad/fixed/transformer.hpp"
