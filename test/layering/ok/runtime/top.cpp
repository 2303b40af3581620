#include "metagrad/top.hpp"
#include "mid/x.hpp"
