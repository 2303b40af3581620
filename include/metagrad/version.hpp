#pragma once
// metagrad's version, the same as the CMake project's (project(metagrad VERSION ...) in the top-level
// CMakeLists.txt; the test `version_header` fails when the two differ). The shared library's
// SOVERSION is the major version; the package accepts requests of the same major.minor.
#define METAGRAD_VERSION_MAJOR 0
#define METAGRAD_VERSION_MINOR 1
#define METAGRAD_VERSION_PATCH 0
#define METAGRAD_VERSION_STRING "0.1.0"
// One number for comparisons: 10000 * major + 100 * minor + patch.
#define METAGRAD_VERSION \
  (METAGRAD_VERSION_MAJOR * 10000 + METAGRAD_VERSION_MINOR * 100 + METAGRAD_VERSION_PATCH)
