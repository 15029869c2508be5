// A file that breaks the layering on purpose (tests/CMakeLists.txt lint.layers_catches).
#pragma once

#include "io/uri.h"
