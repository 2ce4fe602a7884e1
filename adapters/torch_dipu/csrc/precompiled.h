// The torch headers that nearly every translation unit of torch_dipu._C
// includes, compiled once into a precompiled header by setup.py (GCC only)
// and put in front of every file with -include: parsing them is most of
// each file's compile time. Not included by any source file directly.
#pragma once
#include <ATen/ATen.h>
#include <torch/library.h>
