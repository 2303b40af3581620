#pragma once

namespace metagrad::detail {
int x;
}
