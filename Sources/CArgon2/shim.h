#ifndef LARDER_CARGON2_SHIM_H
#define LARDER_CARGON2_SHIM_H
// The reference implementation of Argon2 (libargon2): Argon2id password hashes for the accounts Larder keeps
// (LarderAuth's PasswordHasher.swift), in the PHC string format that records each hash's parameters.
#include <argon2.h>
#endif
