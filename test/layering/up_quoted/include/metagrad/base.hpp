#pragma once
#include "metagrad/mid/a.hpp"
