#ifndef TRANSFERD_CCRYPTO_SHIM_H
#define TRANSFERD_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#endif
