// deltatune::Error and check() are public (the CLI and the studio catch them): deltatune/error.h.
#pragma once
#include "deltatune/error.h"
