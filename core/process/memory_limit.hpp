// A memory limit as RLIMIT_AS, the one limit Linux enforces on a process's own allocations.
//
// RLIMIT_AS counts address space, not memory touched: what is mapped already (the program, its
// libraries, the plan read so far) and every thread's whole stack (glibc reserves the full default
// stack, 8 MiB under the usual `ulimit -s`, however little of it is used). A limit of "N MiB" is
// therefore set as what is mapped now, plus N MiB to allocate, plus the stacks of the threads the
// process will still start; without that allowance a low limit is spent on stacks alone and
// starting a thread fails (EAGAIN), which is the limit's effect, not an internal error.
#pragma once

#include <cstdint>
#include <exception>

namespace tv {

/// Bytes of address space this process has mapped now (/proc/self/statm).
std::uint64_t mappedBytes();

/// Bytes of address space one new thread reserves for its stack (and guard page).
std::uint64_t threadStackBytes();

/// Caps this process's address space at mappedBytes() + `mib` MiB + `threadsToStart` stacks,
/// never above the hard limit already in force. `mib` 0: no limit (nothing is changed).
void capAddressSpace(std::uint64_t mib, unsigned threadsToStart);

/// Keeps malloc to at most `arenas` arenas in this process; call it before a second thread
/// allocates (glibc fixes the bound then). Under an address-space cap, a thread's own arena is a
/// hazard: its first allocation reserves 64 MiB aligned to 64 MiB. Where the kernel places that
/// aligned (address-space layout is random) it holds most of a low allowance; where it cannot, glibc
/// serves that thread's every allocation with a mapping of its own (a page at least, after two
/// failed reservations), and a stage that needs a few MiB runs out of a 64 MiB limit.
void limitMallocArenas(int arenas);

/// A helper process started by a process that capped its address space inherits that cap, set
/// for the parent's mappings, not its own. Lifts the soft limit to the hard one (the helper caps
/// itself once it knows its allowance). Returns whether a hard limit remains (`ulimit -v`).
bool liftInheritedAddressSpaceCap();

/// Whether this process's address space is capped (RLIMIT_AS below infinity).
bool addressSpaceCapped();

/// Whether `e` says the process ran out of memory or of address space: std::bad_alloc, or a
/// std::system_error for ENOMEM or EAGAIN (a thread that could not be started, a mapping refused).
bool isOutOfMemory(const std::exception& e);

}  // namespace tv
