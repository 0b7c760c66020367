@_exported import CMicroHTTPD

/// What the agent's HTTP interface and the emulator share of libmicrohttpd: sending a
/// response in one buffer and reading a request's header fields or query arguments.
public enum MicroHTTPD {
    /// Queues `status`, `headers` and `body` on `connection`. The body is copied into one
    /// buffer, so libmicrohttpd writes headers and body together (no Nagle stall between them).
    public static func respond(_ connection: OpaquePointer, status: Int, headers: [(name: String, value: String)],
                               body: [UInt8]) -> MHD_Result {
        guard let response = makeResponse(headers: headers, body: body) else { return MHD_Result.NO }
        let result = MHD_queue_response(connection, UInt32(status), response)
        MHD_destroy_response(response)
        return result
    }

    /// A response holding its own copy of `body`, with `headers`; the caller destroys it
    /// (`MHD_destroy_response`) when it queues it no more (libmicrohttpd keeps it while
    /// connections still send it).
    public static func makeResponse(headers: [(name: String, value: String)], body: [UInt8]) -> OpaquePointer? {
        let response = body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                                            MHD_ResponseMemoryMode.RESPMEM_MUST_COPY)
        }
        guard let response else { return nil }
        for h in headers { _ = MHD_add_response_header(response, h.name, h.value) }
        return response
    }

    /// The request's values of `kind` (header fields, query arguments), in order, names as sent.
    public static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [(name: String, value: String)] {
        var out: [(name: String, value: String)] = []
        withUnsafeMutablePointer(to: &out) { pointer in
            _ = MHD_get_connection_values(connection, kind, { context, _, key, value in
                guard let context, let key else { return MHD_Result.YES }
                let out = context.assumingMemoryBound(to: [(name: String, value: String)].self)
                out.pointee.append((String(cString: key), value.map { String(cString: $0) } ?? ""))
                return MHD_Result.YES
            }, pointer)
        }
        return out
    }
}
