#ifndef TRANSFERD_CCURL_SHIM_H
#define TRANSFERD_CCURL_SHIM_H
/* libcurl for Swift: the variadic setopt/getinfo calls are not importable,
   so each argument type gets a typed static-inline wrapper here. */
#include <curl/curl.h>

typedef size_t (*tdc_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*tdc_xferinfo_callback)(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
                                     curl_off_t ultotal, curl_off_t ulnow);
typedef int (*tdc_seek_callback)(void *userdata, curl_off_t offset, int origin);

static inline CURLcode tdc_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tdc_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tdc_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tdc_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tdc_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tdc_easy_setopt_data_callback(CURL *h, CURLoption o, tdc_data_callback v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tdc_easy_setopt_xferinfo_callback(CURL *h, tdc_xferinfo_callback v) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, v); }
static inline CURLcode tdc_easy_setopt_seek_callback(CURL *h, tdc_seek_callback v) { return curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, v); }

static inline CURLcode tdc_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode tdc_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode tdc_easy_getinfo_string(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode tdc_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }

static inline CURLMcode tdc_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }

/* Constants defined as macros that Swift does not import. */
static const long tdc_readfunc_abort = CURL_READFUNC_ABORT;
static const long tdc_readfunc_pause = CURL_READFUNC_PAUSE;
static const size_t tdc_writefunc_pause = CURL_WRITEFUNC_PAUSE;
static const int tdc_seekfunc_ok = CURL_SEEKFUNC_OK;
static const int tdc_seekfunc_fail = CURL_SEEKFUNC_FAIL;
static const int tdc_seekfunc_cantseek = CURL_SEEKFUNC_CANTSEEK;

#endif
