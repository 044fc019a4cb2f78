// Large outputs of the CPU kernels and the pages under them.
#pragma once

#include <cstddef>

namespace softsw::cpu {

// Asks the OS to back the whole 2 MiB pages inside [p, p + bytes) with huge
// pages, before the kernel first writes them. A buffer above glibc's mmap
// threshold (32 MiB at most: the affine forward's state at 64 x 256 x 256)
// is fresh memory on every call, and faulting it in 4 KiB pages cost a third
// of the training forward, measured; with transparent huge pages in
// "madvise" mode (a common default) nothing else asks for them. A hint only:
// no effect elsewhere, or when the pages are already there.
void advise_huge_pages(void* p, size_t bytes);

}  // namespace softsw::cpu
