// The emulation of dev/emulate/emulation.h stands in for the CUDA toolkit.
#pragma once
#include "../emulation.h"
