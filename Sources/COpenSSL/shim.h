#ifndef LARDER_COPENSSL_SHIM_H
#define LARDER_COPENSSL_SHIM_H
// OpenSSL's libcrypto, for SHA-256 on Linux (LarderWire's Digest.swift): its EVP digests use the CPU's SHA
// instructions.
// TLS is GnuTLS's (CGnuTLS); nothing here links libssl.
#include <openssl/evp.h>
// The signatures of OpenID Connect ID tokens (LarderAuth): public keys built from a JWKS's numbers (core_names.h's
// parameter names, param_build.h's builder, bn.h's big numbers), ES256's raw signatures made DER (ecdsa.h), and the
// thread's error queue emptied after a refused key or signature (err.h). Also the random bytes of salts and session
// tokens (rand.h: RAND_bytes, seeded from the operating system).
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/bn.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/rand.h>

// EVP_PKEY_fromdata's selection for a public key: a macro of an expression, which Swift does not import.
static inline int larder_evp_pkey_public_key(void) { return EVP_PKEY_PUBLIC_KEY; }

// The names and strings of the parameters LarderAuth builds keys from. OSSL_PARAM_BLD keeps pointers to them until
// OSSL_PARAM_BLD_to_param, so they must outlive the call that pushes them: these are C literals, where a Swift String
// passed as `const char *` lives only for that call.
static inline const char *larder_param_rsa_n(void) { return OSSL_PKEY_PARAM_RSA_N; }
static inline const char *larder_param_rsa_e(void) { return OSSL_PKEY_PARAM_RSA_E; }
static inline const char *larder_param_group_name(void) { return OSSL_PKEY_PARAM_GROUP_NAME; }
static inline const char *larder_param_pub_key(void) { return OSSL_PKEY_PARAM_PUB_KEY; }
static inline const char *larder_group_p256(void) { return "P-256"; }
#endif
