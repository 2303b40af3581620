#include "metagrad/stray.hpp"
