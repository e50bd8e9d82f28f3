#ifndef LARDER_CEPOLL_SHIM_H
#define LARDER_CEPOLL_SHIM_H
// Linux's readiness API for the server's event loops, and accept4; Swift's Glibc module leaves these out.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

// accept4(2) is a GNU extension the Glibc module does not declare: one call that accepts a connection already
// non-blocking and close-on-exec.
int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);

static inline int larder_accept_nonblocking(int listener) {
    return accept4(listener, 0, 0, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

// ppoll(2) (a GNU extension too): poll with a nanosecond timeout, which larder-bench's open loop needs to send on
// schedule (poll's milliseconds, rounded up, made requests leave up to a millisecond late).
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const sigset_t *sigmask);

static inline int larder_poll_ns(struct pollfd *fds, unsigned long count, long long timeoutNs) {
    struct timespec timeout = {timeoutNs / 1000000000LL, timeoutNs % 1000000000LL};
    return ppoll(fds, (nfds_t)count, timeoutNs < 0 ? 0 : &timeout, 0);
}

// The calling thread's timer slack: how late the kernel may end its sleeps to batch wake-ups (50 us by default).
static inline int larder_set_timer_slack_ns(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0);
}

// sync_file_range(2) (a GNU extension too): starts writing a file's range back to disk without waiting, so that the
// fsync that makes a downloaded file durable finds most of its bytes already written.
#include <stdint.h>
int sync_file_range(int fd, int64_t offset, int64_t nbytes, unsigned int flags);

static inline int larder_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, offset, count, 2 /* SYNC_FILE_RANGE_WRITE */);
}

// sendfile(2): a blob file's range sent to a socket by the kernel, without a copy through the server's memory.
#include <sys/sendfile.h>

static inline long larder_sendfile(int socket, int file, long long offset, unsigned long count) {
    off_t position = (off_t)offset;
    return (long)sendfile(socket, file, &position, count);
}

// glibc's malloc tuning (malloc.h, which the Glibc module leaves out): the size from which each allocation is a
// mapping of its own, unmapped when freed.
#include <malloc.h>

static inline int larder_set_malloc_map_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}
#endif
