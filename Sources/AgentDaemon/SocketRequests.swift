import AgentCore
import AgentWire
import FoundationEssentials

/// A connection's requests, from its bytes to the answer line: the `LineFramer` cuts lines,
/// the fast path answers the usual `isEnabled`/`get` in place, any other line is parsed
/// (`RPCMessage.parse`), checked and decoded into a typed `SocketCall` (AgentWire), and
/// performed on the agent here. Reads are answered inline, in the same loop pass that read
/// the request; `refresh` answers when the network does, without holding up the requests
/// behind it. Connections, access and notifications are in ControlServer.swift.
extension ControlServer {
    func handleLine(_ line: UnsafeRawBufferPointer, from client: Client) {
        if line.isEmpty { return }  // blank lines between messages are tolerated
        if let request = RPCFastPath.scan(line) {
            answerFast(request, to: client)
            return
        }
        readTime = nil  // whatever this line does (advanceClock), the next read asks the clock again
        defer { readTime = nil }
        switch RPCMessage.parse(line) {
        case .single(.failure(let rejection)):
            metrics?.rpcError(rejection.error.code)
            client.connection.send(RPCEncoder.line(rejection.response))
        case .single(.success(let request)):
            client.pendingAnswers += 1
            dispatch(request, from: client) { [unowned self] outcome in
                client.pendingAnswers -= 1
                if let id = request.id {
                    self.sendAnswer(RPCEncoder.line(RPCResponse(id: id, outcome)), to: client)
                }
                self.answered(client)
            }
        case .batch(let items):
            let batch = BatchAnswer(count: items.count)
            client.pendingAnswers += 1
            let finish: () -> Void = { [unowned self] in
                client.pendingAnswers -= 1
                if let bytes = RPCEncoder.batch(batch.responses.compactMap { $0 }) { self.sendAnswer(bytes, to: client) }
                self.answered(client)
            }
            for (index, item) in items.enumerated() {
                switch item {
                case .failure(let rejection):
                    metrics?.rpcError(rejection.error.code)
                    batch.set(index, rejection.response, then: finish)
                case .success(let request):
                    dispatch(request, from: client) { outcome in
                        batch.set(index, request.id.map { RPCResponse(id: $0, outcome) }, then: finish)
                    }
                }
            }
        }
    }

    /// The hot path: an ordinary `isEnabled` or `get` (both read methods, allowed to every
    /// client) answered without a JSON tree, into a buffer reused for every answer. The
    /// answer bytes are those the general path writes (RPCFastPath).
    private func answerFast(_ request: RPCFastPath.Request, to client: Client) {
        let now: Now
        if let readTime {
            now = readTime
        } else {
            now = agent.now
            readTime = now
        }
        if case .isEnabled(let fallback) = request.method {
            // The usual answer goes from the stack to the connection's output (no scratch buffer).
            metrics?.rpcFastRequest(isEnabled: true)
            let e = agent.isEnabled(request.key, default: fallback, at: now)
            let sent = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: RPCFastPath.usualAnswerCapacity) { buffer -> Bool in
                guard let count = RPCFastPath.usualIsEnabledAnswer(id: request.id, enabled: e.value, provenance: e.provenance,
                                                                   into: buffer) else { return false }
                client.connection.send(UnsafeRawBufferPointer(start: buffer.baseAddress, count: count))
                return true
            }
            if sent { return answered(client) }
            return answerInScratch(request, e, to: client, at: now)
        }
        answerInScratch(request, nil, to: client, at: now)
    }

    /// Any other fast-path answer, written into the reused scratch buffer: `isEnabled`'s
    /// (already evaluated: `evaluated`) when it is not of the usual shape, and `get`'s.
    private func answerInScratch(_ request: RPCFastPath.Request, _ evaluated: Evaluation<Bool>?, to client: Client, at now: Now) {
        // One access to the buffer for the whole answer.
        Self.reusing(&scratch) { w in
            w.bytes.removeAll(keepingCapacity: true)
            switch request.method {
            case .isEnabled(let fallback):
                let e = evaluated ?? agent.isEnabled(request.key, default: fallback, at: now)
                RPCFastPath.writeIsEnabled(id: request.id, enabled: e.value, provenance: e.provenance, into: &w)
            case .get:
                metrics?.rpcFastRequest(isEnabled: false)
                let e = agent.get(request.key, at: now)
                RPCFastPath.writeGet(id: request.id, flag: e.value, provenance: e.provenance, into: &w)
            }
            // A flag too large for one line (its properties over 1 MiB) gets the general path's
            // refusal, never a line the client must cut.
            if w.bytes.count > LineFramer.defaultMaximumLineLength + 1 {
                sendAnswer(w.bytes, to: client)
            } else {
                w.bytes.withUnsafeBytes { client.connection.send($0) }
            }
        }
        answered(client)
    }

    /// An answer line, or, when it would be longer than the line limit (a huge batch), the
    /// error -32600 naming the limit instead: never a line a client must refuse or cut.
    private func sendAnswer(_ line: [UInt8], to client: Client) {
        let limit = LineFramer.defaultMaximumLineLength  // every client's framer's (not read: it may be framing)
        guard line.count > limit + 1 else { return client.connection.send(line) }
        let error = RPCError.invalidRequest("the answer would be \(line.count - 1) bytes, over the line limit of \(limit) bytes; send a smaller batch")
        metrics?.rpcError(error.code)
        warnings.warn("answer refused: longer than the line limit", ["bytes": line.count - 1, "limit": limit, "pid": client.credentials?.pid])
        client.connection.send(RPCEncoder.error(id: .null, error))
    }

    @inline(__always)
    private static func reusing(_ writer: inout JSONWriter, _ body: (inout JSONWriter) -> Void) { body(&writer) }

    func answered(_ client: Client) {
        if client.inputClosed, client.pendingAnswers == 0 { client.connection.closeAfterFlush() }
    }

    /// The method, then the caller's access (B.3), then the parameters (AgentWire's
    /// `SocketCall.decode`), then the call: each refusal is the error of the first check failed.
    private func dispatch(_ request: RPCRequest, from client: Client, _ answer: @escaping (RPCOutcome) -> Void) {
        metrics?.rpcRequest(request.method)
        let done = countingAnswer(request, answer)
        do throws(RPCError) {
            guard let method = SocketMethod(rawValue: request.method) else { throw .methodNotFound(request.method) }
            if method.access == .control, !client.mayChangeState {
                log(.warning, "permission denied", ["method": request.method, "uid": client.credentials?.uid, "pid": client.credentials?.pid])
                throw .permissionDenied(method: request.method)
            }
            try perform(SocketCall.decode(method, request.params), for: client, done)
        } catch {
            done(.failure(error))
        }
    }

    /// The socket methods of docs/socket-api.md B.1, B.2 and H: the connection's own (`subscribe`,
    /// `unsubscribe`, `metrics`) here, the rest on the core `Agent`. A throw comes before
    /// `done` is called.
    private func perform(_ call: SocketCall, for client: Client, _ done: @escaping (RPCOutcome) -> Void) throws(RPCError) {
        switch call {
        case .get(let key):
            let e = agent.get(key)
            done(.success(FlagAnswers.get(e.value, e.provenance)))
        case .isEnabled(let key, let fallback):
            let e = agent.isEnabled(key, default: fallback)
            done(.success(FlagAnswers.isEnabled(e.value, e.provenance)))
        case .property(let key, let name, let type, let fallback):
            let e = agent.property(key, name, type: type, default: fallback)
            done(.success(FlagAnswers.property(e.value, e.provenance)))
        case .refresh:
            // A refresh answered at once never went to the server: the throttle window
            // (RF-6) or no flags URL (RF-8). `sent` says which kind it was (docs/device-clock.md H).
            // A success answered at once is the throttle's: `throttledUntil` names the
            // window's end in device time, rounded up to the second it is printed in.
            var returned = false
            let agent = self.agent
            agent.refresh { error in  // subscribers hear of it as AgentEvent.refreshNotSent
                let sent = returned
                let until = sent || error != nil ? nil : agent.throttleWindowEnd().map {
                    Date(timeIntervalSince1970: $0.timeIntervalSince1970.rounded(.up))
                }
                done(.success(RefreshAnswer(error: error, sent: sent, throttledUntil: until).json))
            }
            returned = true
        case .logImpression(let key):
            try done(.success(saving(call) { ["logged": .bool(agent.logImpression(key))] }))
        case .setUserId(let userId):
            try done(.success(saving(call) { agent.setUserId(userId); return [:] }))
        case .setAppState(let state):
            try done(.success(saving(call) { ["sessionStarted": .bool(agent.setAppState(state))] }))
        case .registerForPushNotifications:
            try done(.success(saving(call) {
                let r = agent.registerForPushNotifications()
                return RegistrationAnswer(granted: r.granted, pushToken: r.pushToken).json
            }))
        case .unregisterForPushNotifications:
            try done(.success(saving(call) { agent.unregisterForPushNotifications(); return [:] }))
        case .setNotificationAuthorization(let status):
            try done(.success(saving(call) { agent.setNotificationAuthorization(status); return [:] }))
        case .presentPushPrimer(let configuration):
            try done(.success(saving(call) { agent.presentPushPrimer(configuration).json }))
        case .status:
            done(.success(StatusAnswer(version: StatusReport.version, status: agent.status(), httpAddress: httpAddress).json))
        case .clock:
            guard let controller = clockController else { throw .clockNotControlled(method: call.method.rawValue) }
            done(.success(controller.clockResult()))
        case .advanceClock(let target):
            guard let controller = clockController else { throw .clockNotControlled(method: call.method.rawValue) }
            try controller.advance(target, done)
        case .subscribe(let events):
            client.events = events
            subscribers[ObjectIdentifier(client)] = client
            client.connection.setIdleTimeout(nil)  // B.3: subscribers are not idle
            done(.success([:]))
        case .unsubscribe:
            subscribers[ObjectIdentifier(client)] = nil
            client.connection.setIdleTimeout(settings.idleTimeout)
            done(.success([:]))
        case .metrics:
            guard let metricsText else { throw .methodNotFound(call.method.rawValue) }
            done(.success(["text": .string(metricsText())]))
        }
    }

    /// Runs a state-changing call on the agent: its answer, or `-32005` when the save its
    /// change needed failed (the change holds in memory and the save is retried).
    private func saving(_ call: SocketCall, _ body: () -> JSONValue) throws(RPCError) -> JSONValue {
        let (answer, failure) = agent.checkingSaves(body)
        if let failure { throw .stateNotSaved(method: call.method.rawValue, error: failure) }
        return answer
    }
}
