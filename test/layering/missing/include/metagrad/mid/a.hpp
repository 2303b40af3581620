#pragma once
#include "metagrad/mid/gone.hpp"
