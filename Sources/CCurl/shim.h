// libcurl for Swift: curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are
// variadic, which Swift cannot call; these typed wrappers are the whole shim. libcurl is not
// linked: AgentCurl loads it with dlopen when it is first needed (CurlLibrary.swift), so each
// wrapper is given the function to call (`fn`, that variadic function's address).
#include <curl/curl.h>

typedef CURLcode (*pw_curl_easy_setopt_fn)(CURL *, CURLoption, ...);
typedef CURLcode (*pw_curl_easy_getinfo_fn)(CURL *, CURLINFO, ...);
typedef CURLMcode (*pw_curl_multi_setopt_fn)(CURLM *, CURLMoption, ...);

typedef size_t (*pw_curl_data_callback)(char *data, size_t size, size_t count, void *user);
typedef int (*pw_curl_socket_callback)(CURL *easy, curl_socket_t fd, int what, void *user, void *socket_user);
typedef int (*pw_curl_timer_callback)(CURLM *multi, long timeout_ms, void *user);

static inline CURLcode pw_curl_easy_setopt_long(const void *fn, CURL *easy, CURLoption option, long value) {
    return ((pw_curl_easy_setopt_fn)fn)(easy, option, value);
}
static inline CURLcode pw_curl_easy_setopt_offset(const void *fn, CURL *easy, CURLoption option, curl_off_t value) {
    return ((pw_curl_easy_setopt_fn)fn)(easy, option, value);
}
static inline CURLcode pw_curl_easy_setopt_pointer(const void *fn, CURL *easy, CURLoption option, void *value) {
    return ((pw_curl_easy_setopt_fn)fn)(easy, option, value);
}
static inline CURLcode pw_curl_easy_setopt_string(const void *fn, CURL *easy, CURLoption option, const char *value) {
    return ((pw_curl_easy_setopt_fn)fn)(easy, option, value);
}
static inline CURLcode pw_curl_easy_setopt_data_callback(const void *fn, CURL *easy, CURLoption option, pw_curl_data_callback value) {
    return ((pw_curl_easy_setopt_fn)fn)(easy, option, value);
}
static inline CURLcode pw_curl_easy_getinfo_long(const void *fn, CURL *easy, CURLINFO info, long *value) {
    return ((pw_curl_easy_getinfo_fn)fn)(easy, info, value);
}
static inline CURLMcode pw_curl_multi_setopt_long(const void *fn, CURLM *multi, CURLMoption option, long value) {
    return ((pw_curl_multi_setopt_fn)fn)(multi, option, value);
}
static inline CURLMcode pw_curl_multi_setopt_pointer(const void *fn, CURLM *multi, CURLMoption option, void *value) {
    return ((pw_curl_multi_setopt_fn)fn)(multi, option, value);
}
static inline CURLMcode pw_curl_multi_setopt_socket_callback(const void *fn, CURLM *multi, pw_curl_socket_callback value) {
    return ((pw_curl_multi_setopt_fn)fn)(multi, CURLMOPT_SOCKETFUNCTION, value);
}
static inline CURLMcode pw_curl_multi_setopt_timer_callback(const void *fn, CURLM *multi, pw_curl_timer_callback value) {
    return ((pw_curl_multi_setopt_fn)fn)(multi, CURLMOPT_TIMERFUNCTION, value);
}
static inline CURLcode pw_curl_easy_getinfo_pointer(const void *fn, CURL *easy, CURLINFO info, void *value) {
    return ((pw_curl_easy_getinfo_fn)fn)(easy, info, (char **)value);
}
typedef int (*pw_curl_seek_callback)(void *user, curl_off_t offset, int origin);
static inline CURLcode pw_curl_easy_setopt_seek_callback(const void *fn, CURL *easy, pw_curl_seek_callback value) {
    return ((pw_curl_easy_setopt_fn)fn)(easy, CURLOPT_SEEKFUNCTION, value);
}
/* CURLOPT_CAINFO_BLOB / CURLOPT_PROXY_CAINFO_BLOB take a struct curl_blob; libcurl copies it. */
static inline CURLcode pw_curl_easy_setopt_blob(const void *fn, CURL *easy, CURLoption option, const void *data, size_t length) {
    struct curl_blob blob = { (void *)data, length, CURL_BLOB_COPY };
    return ((pw_curl_easy_setopt_fn)fn)(easy, option, &blob);
}
/* CURLINFO_CERTINFO: the server's chain, each certificate a list of "Name:value" lines. */
static inline int pw_curl_certinfo_count(const void *fn, CURL *easy) {
    struct curl_certinfo *info = NULL;
    if (((pw_curl_easy_getinfo_fn)fn)(easy, CURLINFO_CERTINFO, &info) != CURLE_OK || info == NULL) return 0;
    return info->num_of_certs;
}
static inline struct curl_slist *pw_curl_certinfo_at(const void *fn, CURL *easy, int index) {
    struct curl_certinfo *info = NULL;
    if (((pw_curl_easy_getinfo_fn)fn)(easy, CURLINFO_CERTINFO, &info) != CURLE_OK || info == NULL || index >= info->num_of_certs) return NULL;
    return info->certinfo[index];
}
static inline CURLcode pw_curl_easy_getinfo_double(const void *fn, CURL *easy, CURLINFO info, double *value) {
    return ((pw_curl_easy_getinfo_fn)fn)(easy, info, value);
}
static inline CURLcode pw_curl_easy_getinfo_offset(const void *fn, CURL *easy, CURLINFO info, curl_off_t *value) {
    return ((pw_curl_easy_getinfo_fn)fn)(easy, info, value);
}
