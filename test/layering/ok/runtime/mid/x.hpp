#pragma once
#include "k.inc"
