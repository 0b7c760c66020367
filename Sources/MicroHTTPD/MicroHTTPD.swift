import AgentPosix
@_exported import CMicroHTTPD

/// libmicrohttpd, loaded with `dlopen` when an HTTP server first starts instead of by the
/// dynamic loader at `exec`: the agent starts its HTTP interface after `READY=1` (its
/// listening socket is bound before), and an agent without one never maps it. libmicrohttpd
/// and the ~10 libraries it brings (GnuTLS, p11-kit, nettle, gmp, …) were two thirds of the
/// dynamic loader's symbol lookups before `READY=1` (docs/performance.md "Where the time
/// went"). Its functions are called through these pointers, the variadic ones through
/// the shim's wrappers. A missing libmicrohttpd.so.12 is a broken installation (`DynamicLibrary`).
public enum MHD {
    private static let library = DynamicLibrary("libmicrohttpd.so.12")

    nonisolated(unsafe) public static let stopDaemon = library.function("MHD_stop_daemon", as: pw_mhd_stop_daemon_fn.self)
    nonisolated(unsafe) public static let run = library.function("MHD_run", as: pw_mhd_run_fn.self)
    nonisolated(unsafe) public static let getTimeout = library.function("MHD_get_timeout", as: pw_mhd_get_timeout_fn.self)
    nonisolated(unsafe) public static let isFeatureSupported = library.function("MHD_is_feature_supported", as: pw_mhd_is_feature_supported_fn.self)
    nonisolated(unsafe) public static let queueResponse = library.function("MHD_queue_response", as: pw_mhd_queue_response_fn.self)
    nonisolated(unsafe) public static let createResponseFromBuffer = library.function(
        "MHD_create_response_from_buffer", as: pw_mhd_create_response_from_buffer_fn.self)
    nonisolated(unsafe) public static let createResponseFromCallback = library.function(
        "MHD_create_response_from_callback", as: pw_mhd_create_response_from_callback_fn.self)
    nonisolated(unsafe) public static let addResponseHeader = library.function("MHD_add_response_header", as: pw_mhd_add_response_header_fn.self)
    nonisolated(unsafe) public static let destroyResponse = library.function("MHD_destroy_response", as: pw_mhd_destroy_response_fn.self)
    nonisolated(unsafe) public static let suspendConnection = library.function("MHD_suspend_connection", as: pw_mhd_suspend_connection_fn.self)
    nonisolated(unsafe) public static let resumeConnection = library.function("MHD_resume_connection", as: pw_mhd_resume_connection_fn.self)
    nonisolated(unsafe) public static let getConnectionValues = library.function(
        "MHD_get_connection_values", as: pw_mhd_get_connection_values_fn.self)
    nonisolated(unsafe) private static let startDaemonVA = library.address("MHD_start_daemon_va")
    nonisolated(unsafe) private static let getDaemonInfo = library.address("MHD_get_daemon_info")
    nonisolated(unsafe) private static let getConnectionInfo = library.address("MHD_get_connection_info")

    /// `MHD_start_daemon_va`.
    public static func startDaemon(_ flags: UInt32, _ port: UInt16, _ apc: MHD_AcceptPolicyCallback?, _ apcCls: UnsafeMutableRawPointer?,
                                   _ dh: MHD_AccessHandlerCallback?, _ dhCls: UnsafeMutableRawPointer?,
                                   _ options: CVaListPointer) -> OpaquePointer? {
        pw_mhd_start_daemon_va(startDaemonVA, flags, port, apc, apcCls, dh, dhCls, options)
    }

    /// The daemon's epoll descriptor (`MHD_DAEMON_INFO_EPOLL_FD`), or -1.
    public static func epollFD(_ daemon: OpaquePointer) -> Int32 { pw_mhd_epoll_fd(getDaemonInfo, daemon) }

    /// The connection's socket (`MHD_CONNECTION_INFO_CONNECTION_FD`), or -1.
    public static func connectionFD(_ connection: OpaquePointer) -> Int32 { pw_mhd_connection_fd(getConnectionInfo, connection) }
}

/// What the agent's HTTP interface and the emulator share of libmicrohttpd: sending a
/// response in one buffer and reading a request's header fields or query arguments.
public enum MicroHTTPD {
    /// Queues `status`, `headers` and `body` on `connection`. The body is copied into one
    /// buffer, so libmicrohttpd writes headers and body together (no Nagle stall between them).
    public static func respond(_ connection: OpaquePointer, status: Int, headers: [(name: String, value: String)],
                               body: [UInt8]) -> MHD_Result {
        guard let response = makeResponse(headers: headers, body: body) else { return MHD_Result.NO }
        let result = MHD.queueResponse(connection, UInt32(status), response)
        MHD.destroyResponse(response)
        return result
    }

    /// A response holding its own copy of `body`, with `headers`; the caller destroys it
    /// (`MHD.destroyResponse`) when it queues it no more (libmicrohttpd keeps it while
    /// connections still send it).
    public static func makeResponse(headers: [(name: String, value: String)], body: [UInt8]) -> OpaquePointer? {
        let response = body.withUnsafeBytes { bytes in
            MHD.createResponseFromBuffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                                         MHD_ResponseMemoryMode.RESPMEM_MUST_COPY)
        }
        guard let response else { return nil }
        for h in headers { _ = MHD.addResponseHeader(response, h.name, h.value) }
        return response
    }

    /// The request's values of `kind` (header fields, query arguments), in order, names as sent.
    public static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [(name: String, value: String)] {
        var out: [(name: String, value: String)] = []
        withUnsafeMutablePointer(to: &out) { pointer in
            _ = MHD.getConnectionValues(connection, kind, { context, _, key, value in
                guard let context, let key else { return MHD_Result.YES }
                let out = context.assumingMemoryBound(to: [(name: String, value: String)].self)
                out.pointee.append((String(cString: key), value.map { String(cString: $0) } ?? ""))
                return MHD_Result.YES
            }, pointer)
        }
        return out
    }
}
