// Affine-gap CUDA backward (SPEC.md §1, MATH.md "Affine gaps"), implemented
// in affine.cu on the band wavefront of wavefront.cuh; backward_cuda routes
// `problem.affine` here. (The affine forward is forward.cu's skeleton with
// AffineRow.)
#pragma once

#include "problem.h"

namespace softsw {

#ifdef SOFTSW_WITH_CUDA
void affine_backward_cuda(const Problem& problem, const BackwardArgs& args, void* workspace,
                          void* stream);
#endif

}  // namespace softsw
