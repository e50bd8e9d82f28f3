#ifndef LARDER_CXXHASH_SHIM_H
#define LARDER_CXXHASH_SHIM_H
// xxHash (BSD 2-Clause): XXH3's 128-bit hash, the fingerprint a request key keeps of its request (RequestKey.swift):
// a few hundred instructions for a small document, where SHA-256 in software took thousands.
#include <xxhash.h>
#endif
