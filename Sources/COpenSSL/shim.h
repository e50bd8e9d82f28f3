#ifndef LARDER_COPENSSL_SHIM_H
#define LARDER_COPENSSL_SHIM_H
// OpenSSL's libcrypto, for SHA-256 on Linux (LarderWire's Digest.swift): its EVP digests use the CPU's SHA
// instructions.
// TLS is GnuTLS's (CGnuTLS); nothing here links libssl.
#include <openssl/evp.h>
#endif
