/* OpenMP is optional: without it the kernels run on one thread and report so. */
#ifndef ARRPOS_OMP_H
#define ARRPOS_OMP_H
#ifdef _OPENMP
#include <omp.h>
static int arrpos_have_openmp(void) { return 1; }
static int arrpos_max_threads(void) { return omp_get_max_threads(); }
#else
static int arrpos_have_openmp(void) { return 0; }
static int arrpos_max_threads(void) { return 1; }
#endif
#endif
