import AgentCore

/// The network, set up once READY=1 is out. Creating the `CurlTransport` runs
/// `curl_global_init`, which in libcurl 7.88 always initialises OpenSSL (reading openssl.cnf
/// included) and the start-up requests' easy handles: 2.5 M of the 43 M instructions the agent
/// ran until READY=1 with 1,000 stored flags (callgrind). READY=1 never waited for the network (it means: the socket listens and the stored
/// flags are served), so the requests the agent sends while starting (its start-up refresh)
/// are held here and go out, in order, when the daemon calls `open()` right after READY=1.
/// Loop thread only, like the transport it makes.
final class DeferredTransport: HTTPTransport {
    private var make: (() -> any HTTPTransport)?
    private var base: (any HTTPTransport)?
    private var held: [(request: HTTPRequest, completion: (HTTPOutcome) -> Void)] = []

    init(_ make: @escaping () -> any HTTPTransport) {
        self.make = make
    }

    func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) {
        if let base {
            base.send(request, completion: completion)
        } else {
            held.append((request, completion))
        }
    }

    /// The transport once `open()` has made it.
    var opened: (any HTTPTransport)? { base }

    /// Makes the transport and sends what was held. Only the first call does anything.
    func open() {
        guard let make else { return }
        self.make = nil
        let base = make()
        self.base = base
        let held = self.held
        self.held = []
        for (request, completion) in held { base.send(request, completion: completion) }
    }
}
