#pragma once
#include <metagrad/base.hpp>
#include "b.hpp"
#include "stdio.h"
