#include "process/memory_limit.hpp"

#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <new>
#include <system_error>

namespace tv {

std::uint64_t mappedBytes() {
    std::uint64_t pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        unsigned long long p = 0;
        if (std::fscanf(f, "%llu", &p) == 1) pages = p;
        std::fclose(f);
    }
    return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::uint64_t threadStackBytes() {
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    std::size_t size = 0, guard = 0;
    pthread_attr_t attr;
    if (::pthread_getattr_default_np(&attr) == 0) {
        ::pthread_attr_getstacksize(&attr, &size);
        ::pthread_attr_getguardsize(&attr, &guard);
        ::pthread_attr_destroy(&attr);
    }
    // glibc's default when RLIMIT_STACK is unlimited is 2 MiB; 8 MiB covers the usual limit.
    if (size == 0) size = std::size_t{8} << 20;
    return static_cast<std::uint64_t>(size) + std::max<std::uint64_t>(guard, page);
}

void capAddressSpace(std::uint64_t mib, unsigned threadsToStart) {
    if (mib == 0) return;
    rlimit r{};
    if (::getrlimit(RLIMIT_AS, &r) != 0) return;
    auto soft = static_cast<rlim_t>(mappedBytes() + (mib << 20) + threadsToStart * threadStackBytes());
    if (r.rlim_max != RLIM_INFINITY) soft = std::min<rlim_t>(soft, r.rlim_max);
    r.rlim_cur = soft;
    ::setrlimit(RLIMIT_AS, &r);
}

void limitMallocArenas(int arenas) { mallopt(M_ARENA_MAX, std::max(1, arenas)); }

bool liftInheritedAddressSpaceCap() {
    rlimit r{};
    if (::getrlimit(RLIMIT_AS, &r) != 0) return false;
    if (r.rlim_cur != r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        ::setrlimit(RLIMIT_AS, &r);
    }
    return r.rlim_max != RLIM_INFINITY;
}

bool addressSpaceCapped() {
    rlimit r{};
    return ::getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
}

bool isOutOfMemory(const std::exception& e) {
    if (dynamic_cast<const std::bad_alloc*>(&e)) return true;
    if (const auto* s = dynamic_cast<const std::system_error*>(&e))
        return s->code() == std::errc::not_enough_memory || s->code() == std::errc::resource_unavailable_try_again;
    return false;
}

}  // namespace tv
