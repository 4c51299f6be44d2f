// A helper process: work run where it can be stopped for certain.
//
// A thread cannot be stopped from outside, and neither a Z3 call (it honours its timeout and
// interrupt only where it polls for them) nor a Graphviz layout (it has no interrupt at all) can
// be relied on to end when asked. A process can be killed. A helper process is a fresh program
// (posix_spawn of `PROGRAM MODE 3`, a socket on fd 3), never a fork of this one: a fork copies
// the locks and timer threads of a process that has run Z3 or Qt, and the child can deadlock on
// them. It keeps SIGINT and SIGTERM blocked (Ctrl-C reaches the whole process group; the parent
// takes it and stops its helpers itself) and ends with the thread that started it
// (bindToParent: PR_SET_PDEATHSIG), so no helper outlives its parent, however that ends.
//
// Parent and helper exchange frames: a length (8 bytes, host order: both ends are this machine),
// then its bytes. The parent waits for a frame with a deadline and a stop flag, and polls the
// helper's pidfd, so a helper that ends (a crash, out of memory) is noticed at once.
// Linux only (posix_spawn, pidfd, prctl).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace tv {

/// The fd a helper process finds its socket on.
inline constexpr int kHelperChannelFd = 3;

/// Frames on a blocking socket (the helper's side). False when the other end is gone.
bool sendFrame(int fd, const std::string& bytes);
bool receiveFrame(int fd, std::string& bytes);

/// The helper's side: end when the thread that started us ends (SIGKILL), and tell whether that
/// parent (its pid as it sent it) is still the one we have. False: end now.
bool bindToParent(long long parentPid);

/// This program (helper processes run it unless told otherwise): the kernel's link to this
/// process's executable, which still runs this program when the file has been replaced or
/// deleted since (a rebuild or an upgrade during a run).
std::string thisProgram();

/// "SIGKILL", "SIGSEGV", or "signal N".
std::string signalName(int sig);

class HelperProcess {
public:
    using Clock = std::chrono::steady_clock;

    /// How a wait for a frame ended.
    enum class Wait { Frame, Stopped, Deadline, Ended, Failed };

    /// program: an executable that serves `MODE FD` (e.g. "--solver-process"); what: how messages
    /// name it ("solver process", "layout process").
    HelperProcess(std::string program, std::string mode, std::string what);
    ~HelperProcess();  ///< kills the process if it still runs
    HelperProcess(const HelperProcess&) = delete;
    HelperProcess& operator=(const HelperProcess&) = delete;

    /// Starts the process; on failure `why` says what failed.
    bool start(std::string& why);
    bool running() const { return pid_ > 0; }
    /// Whether a process runs that the calling thread started (it lives as long as that thread).
    bool startedHere() const { return pid_ > 0 && owner_ == std::this_thread::get_id(); }
    const std::string& program() const { return program_; }

    /// Sends one frame. False: the process is gone (ended() says how).
    bool send(const std::string& bytes);
    /// Waits for one frame, for the process to end, for `stop`, or for the deadline. On Stopped
    /// and Deadline the process has been killed; on Ended it is gone (ended() says how); on Failed
    /// it has been killed and `error` says why the wait failed.
    Wait receive(std::string& frame, Clock::time_point deadline, const std::atomic<bool>& stop, std::string& error);

    /// After Ended or a failed send: waits for the process and returns its wait status (-1 when
    /// none could be had); the process is forgotten.
    int ended();
    /// Kills the process, if one runs, and waits for it.
    void kill();

private:
    std::string program_, mode_, what_;
    pid_t pid_ = -1;
    int pidfd_ = -1, channel_ = -1;  ///< a pidfd of the process, and our end of its socket pair
    std::thread::id owner_;          ///< the thread that started it
};

}  // namespace tv
