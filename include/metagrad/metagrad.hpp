#pragma once
// Everything a user of metagrad names, in namespace metagrad.
#include "metagrad/shape/shapetracker.hpp"
#include "metagrad/shape/symbolic.hpp"
#include "metagrad/shape/view.hpp"
