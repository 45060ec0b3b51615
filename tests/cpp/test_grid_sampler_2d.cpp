#include "spatialgrad/grid_sampler_2d.h"

#include <gtest/gtest.h>
