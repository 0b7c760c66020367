import AgentCore
import AgentWire
import Foundation
import Testing

/// `SocketCall.decode`: every socket method's parameters become values in one place, and
/// every bad input is `-32602` naming the parameter (B.1, B.2, H), without a socket.
@Suite struct SocketCallTests {
    func decode(_ method: SocketMethod, _ params: [String: JSONValue] = [:]) throws(RPCError) -> SocketCall {
        try SocketCall.decode(method, RPCParams(params))
    }

    /// The error's code and the parameter it names.
    func refused(_ method: SocketMethod, _ params: [String: JSONValue] = [:]) -> (code: Int, parameter: String?)? {
        do {
            _ = try decode(method, params)
            return nil
        } catch {
            return (error.code, error.data?["parameter"]?.stringValue)
        }
    }

    // A misspelt parameter is named beside the missing one it was meant to be.
    @Test func aMissingParameterNamesTheUnknownOnesGiven() {
        do {
            _ = try decode(.get, ["kye": "a"])
            Issue.record("decoded")
        } catch {
            #expect(error.message == "missing required parameter 'key' (unknown parameter 'kye' given)")
            #expect(error.data?["parameter"] == "key")
        }
        do {
            _ = try decode(.isEnabled, ["key": "a", "defualt": true, "x": 1])
            Issue.record("decoded")
        } catch {
            #expect(error.message == "missing required parameter 'default' (unknown parameters 'defualt', 'x' given)")
        }
        #expect(refused(.get, [:])?.parameter == "key")
    }

    @Test func everyMethodDecodesItsParameters() throws {
        #expect(try decode(.get, ["key": "a"]) == .get(key: "a"))
        #expect(try decode(.isEnabled, ["key": "a", "default": true]) == .isEnabled(key: "a", default: true))
        #expect(try decode(.property, ["key": "a", "property": "p", "type": "number", "default": 3])
                == .property(key: "a", property: "p", type: .number, default: 3))
        #expect(try decode(.property, ["key": "a", "property": "p", "type": "jsonObject"])
                == .property(key: "a", property: "p", type: .jsonObject, default: .null))
        // One vocabulary of property types: json and json-object are jsonObject, json-array jsonArray.
        for spelling in ["json", "json-object"] {
            #expect(try decode(.property, ["key": "a", "property": "p", "type": .string(spelling)])
                    == .property(key: "a", property: "p", type: .jsonObject, default: .null))
        }
        #expect(try decode(.property, ["key": "a", "property": "p", "type": "json-array"])
                == .property(key: "a", property: "p", type: .jsonArray, default: .null))
        #expect(try decode(.refresh) == .refresh)
        #expect(try decode(.logImpression, ["key": "a"]) == .logImpression(key: "a"))
        #expect(try decode(.subscribe) == .subscribe(events: [.flags]))
        #expect(try decode(.subscribe, ["events": ["refresh", "state"]]) == .subscribe(events: [.refresh, .state]))
        #expect(try decode(.unsubscribe) == .unsubscribe)
        #expect(try decode(.setUserId, ["userId": "alice"]) == .setUserId("alice"))
        #expect(try decode(.setAppState, ["state": "background"]) == .setAppState(.background))
        #expect(try decode(.registerForPushNotifications) == .registerForPushNotifications)
        #expect(try decode(.unregisterForPushNotifications) == .unregisterForPushNotifications)
        #expect(try decode(.setNotificationAuthorization, ["status": "denied"]) == .setNotificationAuthorization(.denied))
        #expect(try decode(.status) == .status)
        #expect(try decode(.metrics) == .metrics)
        #expect(try decode(.clock) == .clock)
        #expect(try decode(.advanceClock, ["seconds": 60]) == .advanceClock(.seconds(60)))
        #expect(try decode(.advanceClock, ["seconds": 90_000, "allowRemote": true]) == .advanceClock(.seconds(90_000, allowRemote: true)))
        #expect(try decode(.advanceClock, ["seconds": 60, "allowRemote": .null]) == .advanceClock(.seconds(60)))
        #expect(try decode(.advanceClock, ["to": "2026-12-03T10:00:00Z", "seconds": .null])
                == .advanceClock(.to(Date(timeIntervalSince1970: 1_796_292_000))))
        if case .presentPushPrimer = try decode(.presentPushPrimer, ["title": "Hi", "message": "Stay", "acceptButton": "Allow",
                                                                     "declineButton": "Later"]) {} else { Issue.record("primer") }
        for method in SocketMethod.allCases { #expect(((try? decode(method, Self.valid[method] ?? [:]))?.method ?? method) == method) }
    }

    static let valid: [SocketMethod: [String: JSONValue]] = [
        .get: ["key": "a"], .isEnabled: ["key": "a", "default": false], .property: ["key": "a", "property": "p", "type": "string", "default": "x"],
        .logImpression: ["key": "a"], .setUserId: ["userId": "u"], .setAppState: ["state": "active"],
        .setNotificationAuthorization: ["status": "authorized"], .advanceClock: ["seconds": 1],
        .presentPushPrimer: ["title": "Hi", "message": "Stay", "acceptButton": "Allow", "declineButton": "Later"],
    ]

    /// B.3: an unknown parameter is refused by every method, naming it.
    @Test func everyMethodRefusesAnUnknownParameter() {
        for method in SocketMethod.allCases {
            var params = Self.valid[method] ?? [:]
            params["colour"] = "red"
            let answer = refused(method, params)
            #expect(answer?.code == -32602, "\(method)")
            #expect(answer?.parameter == "colour", "\(method)")
        }
    }

    @Test func badValuesNameTheirParameter() {
        #expect(refused(.get)?.parameter == "key")
        #expect(refused(.get, ["key": 1])?.parameter == "key")
        #expect(refused(.isEnabled, ["key": "a"])?.parameter == "default")
        #expect(refused(.isEnabled, ["key": "a", "default": "yes"])?.parameter == "default")
        #expect(refused(.property, ["key": "a", "property": "p", "type": "colour"])?.parameter == "type")
        do {
            _ = try decode(.property, ["key": "a", "property": "p", "type": "colour"])
        } catch {
            #expect(error.message == "parameter 'type' must be one of: string, number, bool, jsonObject (or json, json-object), jsonArray (or json-array)")
        }
        #expect(refused(.property, ["key": "a", "property": "p", "type": 3])?.parameter == "type")
        #expect(refused(.property, ["key": "a", "property": "p", "type": "number", "default": "3"])?.parameter == "default")
        #expect(refused(.setUserId, ["userId": ""])?.parameter == "userId")
        #expect(refused(.setAppState, ["state": "asleep"])?.parameter == "state")
        #expect(refused(.setNotificationAuthorization, ["status": "maybe"])?.parameter == "status")
        #expect(refused(.subscribe, ["events": []])?.parameter == "events")
        #expect(refused(.subscribe, ["events": ["flags", "weather"]])?.parameter == "events")
        #expect(refused(.presentPushPrimer, ["title": "Hi"])?.code == -32602)
        // A required parameter is named before an unknown one.
        #expect(refused(.get, ["colour": "red"])?.parameter == "key")
    }

    /// H: `seconds` (> 0) or `to` (ISO 8601), not both, not neither.
    @Test func advanceClockTakesSecondsOrTo() {
        #expect(refused(.advanceClock)?.parameter == "seconds")
        #expect(refused(.advanceClock, ["seconds": 1, "to": "2026-12-03T10:00:00Z"])?.parameter == "to")
        #expect(refused(.advanceClock, ["seconds": -5])?.parameter == "seconds")
        #expect(refused(.advanceClock, ["seconds": 0])?.parameter == "seconds")
        #expect(refused(.advanceClock, ["seconds": "60"])?.parameter == "seconds")
        #expect(refused(.advanceClock, ["to": "tomorrow"])?.parameter == "to")
        #expect(refused(.advanceClock, ["to": 5])?.parameter == "to")
    }
}
