// PLACEHOLDER during development: the kernels helper replaces this file.
#include "host/matmul.h"
