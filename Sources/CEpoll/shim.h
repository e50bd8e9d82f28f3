#ifndef LARDER_CEPOLL_SHIM_H
#define LARDER_CEPOLL_SHIM_H
// Linux's readiness API for the server's event loops; Swift's Glibc module leaves these headers out.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
