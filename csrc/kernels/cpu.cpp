// Placeholder: replaced by the CPU kernels.
#include "problem.h"
#include <stdexcept>
namespace softsw {
void forward_cpu(const Problem&, const ForwardOutputs&) { throw std::runtime_error("softsw: CPU forward not built yet"); }
void backward_cpu(const Problem&, const BackwardArgs&) { throw std::runtime_error("softsw: CPU backward not built yet"); }
void double_backward_cpu(const Problem&, const DoubleBackwardArgs&) { throw std::runtime_error("not yet"); }
}
