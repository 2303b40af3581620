#pragma once
#include <metagrad/top.hpp>
