// Affine-gap CUDA passes (SPEC.md §1, MATH.md "Affine gaps"), implemented in
// affine.cu on the band wavefront of wavefront.cuh. forward_cuda /
// backward_cuda route `problem.affine` here; cuda_workspace_bytes must cover
// affine_workspace_bytes() for affine problems.
#pragma once

#include <cstdint>

#include "problem.h"

namespace softsw {

#ifdef SOFTSW_WITH_CUDA
// Bytes of scratch workspace the affine passes need (same contract as
// cuda_workspace_bytes: uninitialised, 16-byte aligned, one per pass).
int64_t affine_workspace_bytes(const Problem& problem);
void affine_forward_cuda(const Problem& problem, const ForwardOutputs& out, void* workspace,
                         void* stream);
void affine_backward_cuda(const Problem& problem, const BackwardArgs& args, void* workspace,
                          void* stream);
#endif

}  // namespace softsw
