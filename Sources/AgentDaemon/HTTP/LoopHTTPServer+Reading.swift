import AgentCore
import Glibc

/// One reading of each request (docs/http.md F): the path decoded here, not by libmicrohttpd
/// (whose decoding ends a path at an encoded NUL), and a request that could be read two ways
/// refused before it is answered.
extension LoopHTTPServer {
    /// The request's path, percent-decoded, without its query, control characters kept
    /// (`key%00` is not `key`: it is a key of its own, which no flag has); a path whose decoding
    /// is not UTF-8 as it came, with the problem, for the routes to refuse in their own words (`HTTPServerRequest.unreadablePath`);
    /// or the 400 that refuses, before its body, a request whose body could be framed two
    /// ways (two `Content-Length` fields).
    enum PathReading {
        case path(String)
        case unreadable(raw: String, problem: String)
        case refused(HTTPServerResponse)
    }

    static func readPath(_ url: UnsafePointer<CChar>, headers: [HTTPHeader]) -> PathReading {
        func refuse(_ details: String) -> PathReading {
            .refused(.json(400, HTTPInterface.errorBody(nil, code: "GENERAL", details: details), headers: [("Connection", "close")]))
        }
        if headers.lazy.filter({ $0.isNamed("content-length") }).count > 1 {
            return refuse("more than one Content-Length header")
        }
        var raw = Array(UnsafeBufferPointer(start: UnsafeRawPointer(url).assumingMemoryBound(to: UInt8.self), count: strlen(url)))
        if let q = raw.firstIndex(of: UInt8(ascii: "?")) { raw.removeSubrange(q...) }
        guard let path = percentDecoded(raw) else {
            return .unreadable(raw: String(decoding: raw, as: UTF8.self),
                               problem: "the path, percent-decoded, is not UTF-8")
        }
        return .path(path)
    }

    /// `%XX` decoded (a `%` not followed by two hex digits stays as it is); nil when the
    /// result is not UTF-8.
    static func percentDecoded(_ raw: [UInt8]) -> String? {
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(raw.count)
        var i = 0
        while i < raw.count {
            var byte = raw[i]
            if byte == UInt8(ascii: "%"), i + 2 < raw.count,
               let high = hex(raw[i + 1]), let low = hex(raw[i + 2]) {
                byte = high << 4 | low
                i += 2
            }
            out.append(byte)
            i += 1
        }
        return String(validating: out, as: UTF8.self)
    }
}
