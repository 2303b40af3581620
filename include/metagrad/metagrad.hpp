#pragma once
// Everything a user of metagrad names, in namespace metagrad.
#include "metagrad/helpers.hpp"
#include "metagrad/lazy.hpp"
#include "metagrad/mlops.hpp"
#include "metagrad/ops.hpp"
#include "metagrad/runtime/lib.hpp"
#include "metagrad/shape/shapetracker.hpp"
#include "metagrad/shape/symbolic.hpp"
#include "metagrad/shape/view.hpp"
#include "metagrad/tensor.hpp"
