#ifndef LARDER_CXXHASH_SHIM_H
#define LARDER_CXXHASH_SHIM_H
// xxHash (BSD 2-Clause): XXH3, the fingerprint a request key keeps of its request (RequestKey.swift; 128 bits, or 63
// of a 64-bit hash in a CREATE's row), a few hundred instructions for a small document where SHA-256 in software took
// thousands; and the seeded 64-bit hash of a key that the writer's key index looks it up by (RequestKeyIndex.swift).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

// XXH3's 128-bit hash of `a` followed by `b`, the same as of one buffer holding both, streamed: for a request's
// names and a document too long to copy beside them.
static inline XXH128_hash_t larder_xxh3_128_pair(const void *a, size_t a_length, const void *b, size_t b_length) {
    XXH3_state_t state;
    XXH3_INITSTATE(&state);
    XXH3_128bits_reset(&state);
    XXH3_128bits_update(&state, a, a_length);
    XXH3_128bits_update(&state, b, b_length);
    return XXH3_128bits_digest(&state);
}
#endif
