import AgentCore
import AgentWire
import Foundation
import Testing

/// `SocketCall.params`, the other direction of `decode`: every call a client can make reads
/// back as itself, so a client spelling its calls through it sends what the agent decodes.
@Suite struct SocketCallEncodeTests {
    static var primer: PrimerConfiguration {
        var p = PrimerConfiguration(title: "T", message: "M", acceptButton: "A", declineButton: "D")
        p.style = .alert
        p.position = .top
        p.fallbackToSettings = false
        p.minInterval = 3600
        p.answer = .accept
        p.visuals.image = "bell"
        p.visuals.imageURL = "https://example.com/i.png"
        p.visuals.backgroundColor = PrimerColor("#112233")
        p.visuals.backgroundGradient = [PrimerColor("systemBlue")!, PrimerColor("#aabbccdd")!]
        p.visuals.titleColor = PrimerColor("label")
        p.visuals.messageColor = PrimerColor("secondaryLabel")
        p.visuals.acceptButtonColor = PrimerColor("#000000")
        p.visuals.acceptButtonTextColor = PrimerColor("white")
        p.visuals.declineButtonColor = PrimerColor("clear")
        p.visuals.declineButtonTextColor = PrimerColor("systemBlue")
        p.visuals.cornerRadius = 12
        p.visuals.buttonCornerRadius = 0
        p.visuals.buttonBorderColor = PrimerColor("separator")
        return p
    }

    static let calls: [SocketCall] = [
        .get(key: "a"), .isEnabled(key: "a", default: true), .isEnabled(key: "b", default: false),
        .property(key: "a", property: "p", type: .number, default: 3), .property(key: "a", property: "p", type: .string, default: ""),
        .property(key: "a", property: "p", type: .jsonArray, default: .null), .refresh, .logImpression(key: "k"),
        .subscribe(events: [.flags]), .subscribe(events: [.refresh, .state]), .subscribe(events: [.flags, .refresh, .state]),
        .unsubscribe, .setUserId("u-1"), .setAppState(.background), .registerForPushNotifications,
        .unregisterForPushNotifications, .setNotificationAuthorization(.provisional),
        .presentPushPrimer(PrimerConfiguration(title: "T", message: "M", acceptButton: "A", declineButton: "D")),
        .presentPushPrimer(primer), .status, .metrics, .clock, .advanceClock(.seconds(90.5)), .advanceClock(.seconds(90_000, allowRemote: true)),
        .advanceClock(.to(Date(timeIntervalSince1970: 1_798_761_600))),
        .advanceClock(.to(Date(timeIntervalSince1970: 1_798_761_600.25))),
    ]

    @Test(arguments: calls) func everyCallReadsBackAsItself(_ call: SocketCall) throws {
        #expect(try SocketCall.decode(call.method, RPCParams(call.params)) == call)
    }

    @Test func theDefaultsTravelAsTheAgentReadsThem() {
        #expect(SocketCall.subscribe(events: [.flags]).params == [:])
        #expect(SocketCall.subscribe(events: [.state, .flags]).params == ["events": ["flags", "state"]])
        #expect(SocketCall.property(key: "a", property: "p", type: .jsonObject, default: .null).params
                == ["key": "a", "property": "p", "type": "jsonObject"])
        #expect(SocketCall.presentPushPrimer(PrimerConfiguration(title: "T", message: "M", acceptButton: "A", declineButton: "D")).params
                == ["title": "T", "message": "M", "acceptButton": "A", "declineButton": "D"])
        #expect(SocketCall.advanceClock(.to(Date(timeIntervalSince1970: 1_798_761_600))).params == ["to": "2027-01-01T00:00:00Z"])
        #expect(String(decoding: RPCEncoder.request(id: .number(1), .get(key: "a")), as: UTF8.self)
                == #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"key":"a"}}"# + "\n")
    }

    @Test func aTimeTheAgentWouldRefuseIsNoCall() throws {
        #expect(SocketCall.advanceClock(to: "2026-12-24T00:00:00Z") == .advanceClock(.to(Date(timeIntervalSince1970: 1_798_070_400))))
        #expect(SocketCall.advanceClock(to: "tomorrow") == nil)
        // A fraction of a second travels to the millisecond.
        let half = try #require(SocketCall.advanceClock(to: "2026-12-24T00:00:00.500Z"))
        #expect(try SocketCall.decode(.advanceClock, RPCParams(half.params)) == half)
        #expect(half.params == ["to": "2026-12-24T00:00:00.500Z"])
    }
}
