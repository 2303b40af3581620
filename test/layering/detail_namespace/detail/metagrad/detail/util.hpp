#pragma once
namespace metagrad::detail {}
