// Large arrays read at random — a fabric's links, the max-min system's constraints, the
// route table — on transparent huge pages where the kernel gives them on request (THP
// "madvise", the common default): one TLB entry then covers 2 MiB instead of 4 KiB, and
// a large fabric's lookups stop missing the TLB. Smaller arrays take the ordinary heap.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>
#ifdef __linux__
#include <sys/mman.h>
#endif

namespace clustersim {

template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return static_cast<T*>(::operator new(bytes, std::align_val_t(alignof(T))));
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
    if (p == nullptr) throw std::bad_alloc();
#ifdef __linux__
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: refused or unsupported, the pages stay small
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHuge)
      ::operator delete(p, std::align_val_t(alignof(T)));
    else
      std::free(p);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using BigVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace clustersim
