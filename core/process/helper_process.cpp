#include "process/helper_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

extern char** environ;

namespace tv {

namespace {

bool sendAll(int fd, const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

bool receiveAll(int fd, void* data, std::size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
        ssize_t r = ::recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= static_cast<std::size_t>(r);
    }
    return true;
}

// No frame is larger: a length past it is a broken stream, not a frame to allocate for.
constexpr std::uint64_t kMaxFrame = std::uint64_t{1} << 40;

}  // namespace

bool sendFrame(int fd, const std::string& bytes) {
    const std::uint64_t n = bytes.size();
    return sendAll(fd, &n, sizeof n) && sendAll(fd, bytes.data(), bytes.size());
}

bool receiveFrame(int fd, std::string& bytes) {
    std::uint64_t n = 0;
    if (!receiveAll(fd, &n, sizeof n) || n > kMaxFrame) return false;
    bytes.resize(static_cast<std::size_t>(n));
    return receiveAll(fd, bytes.data(), bytes.size());
}

bool bindToParent(long long parentPid) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have ended before the line above: then we were handed to another process.
    return ::getppid() == static_cast<pid_t>(parentPid);
}

std::string thisProgram() { return "/proc/self/exe"; }

std::string signalName(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

HelperProcess::HelperProcess(std::string program, std::string mode, std::string what)
    : program_(std::move(program)), mode_(std::move(mode)), what_(std::move(what)) {}

HelperProcess::~HelperProcess() { kill(); }

void HelperProcess::kill() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
    if (pidfd_ >= 0) ::close(pidfd_);
    if (channel_ >= 0) ::close(channel_);
    pid_ = -1;
    pidfd_ = channel_ = -1;
}

int HelperProcess::ended() {
    int status = 0;
    pid_t waited = -1;
    if (pid_ > 0)
        while ((waited = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
        }
    pid_ = -1;
    kill();
    return waited > 0 ? status : -1;
}

bool HelperProcess::start(std::string& why) {
    kill();
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        why = "cannot start a " + what_ + ": socketpair: " + std::strerror(errno);
        return false;
    }
    // dup2 onto the same number would keep close-on-exec: move the child's end out of the way.
    if (pair[1] == kHelperChannelFd) {
        const int moved = ::fcntl(pair[1], F_DUPFD_CLOEXEC, kHelperChannelFd + 1);
        ::close(pair[1]);
        pair[1] = moved;
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pair[1], kHelperChannelFd);
    posix_spawnattr_init(&attr);
    // Ctrl-C at the terminal reaches the whole process group: the parent takes it and stops its
    // helpers itself, so they keep SIGINT and SIGTERM blocked.
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGTERM);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &blocked);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const std::string fdText = std::to_string(kHelperChannelFd);
    std::vector<char*> argv = {const_cast<char*>(program_.c_str()), const_cast<char*>(mode_.c_str()), const_cast<char*>(fdText.c_str()),
                               nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, program_.c_str(), &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(pair[1]);
    if (rc != 0) {
        ::close(pair[0]);
        why = "cannot start a " + what_ + " (" + program_ + "): " + std::strerror(rc);
        return false;
    }
    channel_ = pair[0];
    pid_ = pid;
    owner_ = std::this_thread::get_id();
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd_ < 0) {
        why = "cannot watch the " + what_ + ": pidfd_open: " + std::strerror(errno);
        kill();
        return false;
    }
    return true;
}

bool HelperProcess::send(const std::string& bytes) { return channel_ >= 0 && sendFrame(channel_, bytes); }

HelperProcess::Wait HelperProcess::receive(std::string& frame, Clock::time_point deadline, const std::atomic<bool>& stop, std::string& error) {
    frame.clear();
    if (channel_ < 0) return Wait::Ended;
    std::uint64_t expected = 0;
    bool haveLength = false;
    std::string bytes;
    char buf[65536];
    for (;;) {
        if (stop.load()) {
            kill();
            return Wait::Stopped;
        }
        const auto now = Clock::now();
        if (now >= deadline) {
            kill();
            return Wait::Deadline;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
        pollfd fds[2] = {{channel_, POLLIN, 0}, {pidfd_, POLLIN, 0}};
        const int ready = ::poll(fds, 2, static_cast<int>(std::min<long long>(50, left + 1)));
        if (ready < 0 && errno != EINTR) {
            error = "cannot wait for the " + what_ + ": " + std::strerror(errno);
            kill();
            return Wait::Failed;
        }
        if (ready <= 0) continue;
        if (fds[0].revents & POLLIN) {
            const ssize_t r = ::recv(channel_, buf, sizeof buf, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r > 0) {
                bytes.append(buf, static_cast<std::size_t>(r));
                if (!haveLength && bytes.size() >= sizeof expected) {
                    std::memcpy(&expected, bytes.data(), sizeof expected);
                    bytes.erase(0, sizeof expected);
                    haveLength = true;
                    if (expected > kMaxFrame) {
                        error = "the " + what_ + " sent a frame of " + std::to_string(expected) + " bytes";
                        kill();
                        return Wait::Failed;
                    }
                }
                if (haveLength && bytes.size() >= expected) {
                    frame = bytes.substr(0, static_cast<std::size_t>(expected));
                    return Wait::Frame;
                }
                continue;
            }
            // Closed: the process is gone, or going; its status says why.
        } else if (!(fds[1].revents & POLLIN) && !(fds[0].revents & (POLLHUP | POLLERR))) {
            continue;
        }
        return Wait::Ended;
    }
}

}  // namespace tv
