import Glibc

/// A shared library loaded with `dlopen` when it is first needed rather than by the dynamic
/// loader at `exec` (libcurl in AgentCurl, libmicrohttpd in MicroHTTPD: docs/performance.md
/// "Where the time went"), and its functions found by name. A library or function that is
/// missing is a broken installation: the process stops with the loader's message.
public struct DynamicLibrary: @unchecked Sendable {  // a handle that is never closed
    public let name: String
    private let handle: UnsafeMutableRawPointer

    public init(_ name: String) {
        guard let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL) else {
            fatalError("cannot load \(name): \(dlerror().map { String(cString: $0) } ?? "unknown error")")
        }
        self.name = name
        self.handle = handle
    }

    /// The address of `symbol` (for a variadic function, given to a shim's typed wrapper).
    public func address(_ symbol: String) -> UnsafeRawPointer {
        guard let address = dlsym(handle, symbol) else { fatalError("\(name) has no \(symbol)") }
        return UnsafeRawPointer(address)
    }

    /// `symbol` as a C function of type `F`.
    public func function<F>(_ symbol: String, as type: F.Type) -> F { unsafeBitCast(address(symbol), to: type) }
}
