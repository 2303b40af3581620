// The avx2 kernel (flags set in CMakeLists.txt).
#include "sgemm_isa.inc"
