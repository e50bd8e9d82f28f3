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
#endif
