// Affine-gap CUDA passes beyond the forward (docs/semantics.md, docs/math.md
// "Affine gaps"): the backward and the double backward, implemented in affine.cu on
// the band wavefront of wavefront.cuh. backward_cuda / double_backward_cuda
// route `problem.affine` here. The affine forward is forward.cu's skeleton
// with AffineRow; the double backward's tangent pass is that skeleton with
// AffineTangentRow (tangent.cuh).
#pragma once

#include "problem.h"
#include "wavefront.cuh"

namespace softsw {

void affine_backward_cuda(const Problem& problem, const BackwardArgs& args, void* workspace,
                          void* stream);
// `workspace`: cuda_double_backward_workspace_bytes(problem) bytes.
void affine_double_backward_cuda(const Problem& problem, const DoubleBackwardArgs& args,
                                 void* workspace, void* stream);

}  // namespace softsw
