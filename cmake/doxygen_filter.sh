#!/bin/sh
# Doxygen's INPUT_FILTER for the docs target: the headers document each declaration with plain //
# lines above it; as /// lines Doxygen reads them as its documentation.
exec sed -e 's|^\([[:space:]]*\)// |\1/// |' "$1"
