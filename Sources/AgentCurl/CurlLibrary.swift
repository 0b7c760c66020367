import AgentPosix
import CCurl

/// libcurl, loaded with `dlopen` the first time it is used (the agent's first request, after
/// `READY=1`; `--doctor`'s probe) instead of by the dynamic loader at `exec`: libcurl and the
/// ~20 libraries only it brings (OpenSSL, Kerberos, LDAP, SSH, RTMP, …) were most of the
/// loader's work before `READY=1` (docs/performance.md "Where the time went"). Its functions are
/// called through these pointers; the variadic ones (`curl_easy_setopt`, `curl_easy_getinfo`,
/// `curl_multi_setopt`) through the shim's typed wrappers, which are given their address.
/// A missing libcurl.so.4 is a broken installation (`DynamicLibrary`).
enum Curl {
    private static let library = DynamicLibrary("libcurl.so.4")

    // The variadic functions, for the shim's wrappers.
    nonisolated(unsafe) static let easySetopt = library.address("curl_easy_setopt")
    nonisolated(unsafe) static let easyGetinfo = library.address("curl_easy_getinfo")
    nonisolated(unsafe) static let multiSetopt = library.address("curl_multi_setopt")

    nonisolated(unsafe) static let globalInit = library.function("curl_global_init", as: (@convention(c) (Int) -> CURLcode).self)
    nonisolated(unsafe) static let easyInit = library.function("curl_easy_init", as: (@convention(c) () -> UnsafeMutableRawPointer?).self)
    nonisolated(unsafe) static let easyCleanup = library.function("curl_easy_cleanup", as: (@convention(c) (UnsafeMutableRawPointer?) -> Void).self)
    nonisolated(unsafe) static let easyPerform = library.function("curl_easy_perform", as: (@convention(c) (UnsafeMutableRawPointer?) -> CURLcode).self)
    nonisolated(unsafe) static let easyStrerror = library.function("curl_easy_strerror", as: (@convention(c) (CURLcode) -> UnsafePointer<CChar>).self)
    nonisolated(unsafe) static let multiInit = library.function("curl_multi_init", as: (@convention(c) () -> UnsafeMutableRawPointer?).self)
    nonisolated(unsafe) static let multiCleanup = library.function("curl_multi_cleanup", as: (@convention(c) (UnsafeMutableRawPointer?) -> CURLMcode).self)
    nonisolated(unsafe) static let multiAddHandle = library.function(
        "curl_multi_add_handle", as: (@convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> CURLMcode).self)
    nonisolated(unsafe) static let multiRemoveHandle = library.function(
        "curl_multi_remove_handle", as: (@convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> CURLMcode).self)
    nonisolated(unsafe) static let multiInfoRead = library.function(
        "curl_multi_info_read", as: (@convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<Int32>?) -> UnsafeMutablePointer<CURLMsg>?).self)
    nonisolated(unsafe) static let multiSocketAction = library.function(
        "curl_multi_socket_action", as: (@convention(c) (UnsafeMutableRawPointer?, curl_socket_t, Int32, UnsafeMutablePointer<Int32>?) -> CURLMcode).self)
    nonisolated(unsafe) static let multiStrerror = library.function("curl_multi_strerror", as: (@convention(c) (CURLMcode) -> UnsafePointer<CChar>).self)
    nonisolated(unsafe) static let slistAppend = library.function(
        "curl_slist_append", as: (@convention(c) (UnsafeMutablePointer<curl_slist>?, UnsafePointer<CChar>?) -> UnsafeMutablePointer<curl_slist>?).self)
    nonisolated(unsafe) static let slistFreeAll = library.function("curl_slist_free_all", as: (@convention(c) (UnsafeMutablePointer<curl_slist>?) -> Void).self)
}
